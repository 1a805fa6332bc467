"""The extractor's knowledge-graph fact operations with the scripted model: "I live in Paris", then a week
later "I moved to Lisbon", leaves one current lives_in fact and its history; bad fact calls fail alone and
are recorded; the tools are offered only when asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memcore.extraction.events import Event
from memcore.extraction.factory import build_extractor
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.pipeline import run_extraction
from memcore.knowledge import KnowledgeGraph
from memcore.model import UserKey
from memcore.service import MemoryService
from memcore.settings import ExtractorSettings
from memcore.stores.sqlite_archive import SqliteArchive
from memcore.vocabulary import EXTRACTION_TOOLS, FACT_TOOLS
from testkit.scripted_llm import ScriptedLLM, tool_call

KEY = UserKey(app="app", user="u1")
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    return make_service("server")


@pytest.fixture
def kg(tmp_path: Path) -> Iterator[KnowledgeGraph]:
    archive = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "s.sqlite3")
    yield KnowledgeGraph(archive.graph, archive.diary)
    archive.close()


def extractor(llm: ScriptedLLM) -> LLMExtractor:
    return LLMExtractor(llm.base_url, "scripted", tools=EXTRACTION_TOOLS + FACT_TOOLS)


def turn(i: int, text: str, at: datetime) -> Event:
    return Event(id=f"e{i}", role="user", content=text, timestamp=at)


def offered(req: dict[str, object]) -> list[str]:
    return [t["function"]["name"] for t in req.get("tools", [])]  # type: ignore[attr-defined, index]


def test_a_move_leaves_one_current_fact_and_its_history(service: MemoryService, kg: KnowledgeGraph,
                                                        llm: ScriptedLLM) -> None:
    llm.push(lambda req: [tool_call("memory_add", {"memory": "The user lives in Paris."}),
                          tool_call("fact_add", {"subject": "User", "predicate": "lives_in", "object": "Paris"})])
    first = run_extraction(service, KEY, [turn(1, "I live in Paris", T0)], extractor(llm), session="s1",
                           now=T0, graph=kg)
    assert [f.status for f in first.facts] == ["applied"] and first.counts["facts_applied"] == 1
    assert set(FACT_TOOLS) <= set(offered(llm.requests[0]))
    week = T0 + timedelta(days=7)
    llm.push(lambda req: [tool_call("fact_supersede", {"subject": "user", "predicate": "lives in",
                                                       "object": "Lisbon"})])
    second = run_extraction(service, KEY, [turn(1, "I moved to Lisbon", week)], extractor(llm), session="s2",
                            now=week, graph=kg)
    assert [(f.type, f.status, f.closed) for f in second.facts] == [("supersede", "applied", 1)]
    current = kg.query(KEY, {"entity": "User", "predicate": "lives_in", "as_of": week + timedelta(days=1)})
    assert [(f.object_name, f.turns) for f in current] == [("Lisbon", ["s2/e1"])]
    history = kg.query(KEY, {"entity": "User", "predicate": "lives_in"})
    assert [(f.object_name, f.valid_to) for f in history] == [("Paris", week), ("Lisbon", None)]
    assert kg.query(KEY, {"entity": "User", "as_of": T0 + timedelta(days=3)})[0].object_name == "Paris"
    assert len(kg.history(KEY, "User")) == 3  # Paris as added, Paris closed, Lisbon


def test_a_bad_fact_call_fails_alone_and_is_reported(service: MemoryService, kg: KnowledgeGraph,
                                                     llm: ScriptedLLM) -> None:
    llm.push(lambda req: [tool_call("fact_add", {"subject": "", "predicate": "likes", "object": "tea"}),
                          tool_call("fact_add", {"subject": "User", "predicate": "likes", "object": "tea",
                                                 "valid_from": "someday"}),
                          tool_call("fact_add", {"subject": "User", "predicate": "likes", "object": "tea"}),
                          tool_call("fact_invalidate", {"subject": "User", "predicate": "owns", "object": "a car"})])
    report = run_extraction(service, KEY, [turn(1, "I like tea", T0)], extractor(llm), session="s1", now=T0,
                            graph=kg)
    assert [f.status for f in report.facts] == ["failed", "failed", "applied", "skipped"]
    assert report.facts[0].error is not None and "subject" in report.facts[0].error
    assert report.facts[1].error is not None and "valid_from" in report.facts[1].error
    assert [f.object_name for f in kg.query(KEY, {"entity": "user"})] == ["tea"]


def test_fact_tools_are_offered_only_with_the_graph_setting(llm: ScriptedLLM) -> None:
    plain = build_extractor(ExtractorSettings(base_url=llm.base_url, model="m"))
    graph = build_extractor(ExtractorSettings(base_url=llm.base_url, model="m", graph=True))
    assert isinstance(plain, LLMExtractor) and isinstance(graph, LLMExtractor)
    assert not set(FACT_TOOLS) & set(plain.tools) and set(FACT_TOOLS) <= set(graph.tools)
