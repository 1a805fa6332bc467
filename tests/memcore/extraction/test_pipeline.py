"""run_extraction mechanics: existing-entry loading and its fallback, failures, episodes, counts, cursor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memcore.errors import ExtractorError, StoreError
from memcore.extraction.episodes import AssistantEpisodeStage
from memcore.extraction.events import Event, extractable
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.pipeline import load_existing, run_extraction
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.model import Entry, UserKey
from memcore.ports import VectorStore
from memcore.service import MemoryService
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, small_ids, tool_call

KEY = UserKey(app="app", user="u1")
T0 = datetime(2025, 6, 16, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    """This logic does not depend on the backend: the in-memory qdrant-client store is enough here
    (the seed scenarios and apply tests run on both backends)."""
    return make_service("server")


def ev(i: int, role: str, content: str, **kw: Any) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(minutes=i), **kw)  # type: ignore[arg-type]


SESSION = [
    ev(1, "user", "We moved the project to Go 1.23 last week."),
    ev(2, "assistant", "", tool_calls=[{"id": "c1", "function": {"name": "lookup"}}]),
    ev(3, "tool", "Go 1.23 release notes ...", tool_call_id="c1"),
    ev(4, "assistant", "Great, Go 1.23 brings range-over-func iterators."),
]


def extractor(llm: ScriptedLLM, policy: str = "merge_similar") -> LLMExtractor:
    return LLMExtractor(llm.base_url, "scripted", policy=policy)  # type: ignore[arg-type]


class QueriesDown:
    """An embedder whose query side fails (so every search fails) while writes still embed."""

    def __init__(self, real: Any) -> None:
        self.real, self.dim, self.name = real, real.dim, "queries-down"

    def embed_passages(self, texts: Any) -> Any:
        return self.real.embed_passages(texts)

    def embed_queries(self, texts: Any) -> Any:
        raise RuntimeError("query encoder down")


class ReadsDown:
    """A real vector store whose scans fail as well (search and read both fail)."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner = inner

    def scroll(self, *args: Any, **kwargs: Any) -> Iterator[Entry]:
        raise OSError("disk read error")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_worker_order_and_report(service: MemoryService, llm: ScriptedLLM) -> None:
    service.add(KEY, {"text": "The project requires Go 1.21.", "topics": ["go"]})
    llm.push(lambda req: [tool_call("memory_update", {"memory_id": 1, "memory": "The project requires Go 1.23."})])
    report = run_extraction(service, KEY, extractable(SESSION), extractor(llm), session="s1", now=NOW)
    (req,) = llm.requests
    assert small_ids(req) == {1: "The project requires Go 1.21. | topics: go"}
    assert "Go 1.23 release notes" not in messages_text(req)  # tool output never reaches the extractor
    assert report.existing_source == "search" and report.existing_error is None
    assert [r.status for r in report.results] == ["applied"]
    assert report.counts == {"events": 2, "existing": 1, "operations": 1, "applied": 1, "skipped": 0,
                             "failed": 0, "rejected": 0, "episodes": 0}
    assert report.cursor == T0 + timedelta(minutes=4)
    assert [e.text for e in service.read(KEY)] == ["The project requires Go 1.23."]


def test_existing_search_failure_falls_back_to_the_newest_entries(service: MemoryService, llm: ScriptedLLM) -> None:
    for text in ("The project requires Go 1.21.", "The user likes green tea.", "The user lives in Lisbon."):
        service.add(KEY, {"text": text})
    service.embedder = QueriesDown(service.embedder)  # type: ignore[assignment]
    llm.push([tool_call("memory_add", {"memory": "The project moved to Go 1.23."})])
    report = run_extraction(service, KEY, extractable(SESSION), extractor(llm), session="s1", fallback_limit=2,
                            now=NOW)
    assert report.existing_source == "read" and "query encoder down" in (report.existing_error or "")
    assert set(small_ids(llm.requests[0]).values()) == {"The user lives in Lisbon.", "The user likes green tea."}
    (result,) = report.results  # the reconcile search fails too: the add is kept
    assert result.status == "applied" and "search failed" in (result.reason or "")
    assert report.cursor is not None


def test_search_and_read_both_failing_stops_before_the_extractor(service: MemoryService, llm: ScriptedLLM) -> None:
    service.embedder = QueriesDown(service.embedder)  # type: ignore[assignment]
    service.vectors = ReadsDown(service.vectors)  # type: ignore[assignment]
    with pytest.raises(StoreError) as err:
        run_extraction(service, KEY, extractable(SESSION), extractor(llm), session="s1", now=NOW)
    assert err.value.field == "existing" and "disk read error" in err.value.message
    assert llm.requests == []  # no extractor call, no write: the caller keeps its cursor


def test_load_existing_with_an_empty_query_reads(service: MemoryService) -> None:
    service.add(KEY, {"text": "The user lives in Lisbon."})
    entries, how, why = load_existing(service, KEY, "   ")
    assert how == "read" and why == "empty query" and [e.text for e in entries] == ["The user lives in Lisbon."]


@pytest.mark.parametrize("reply", [Reply(status=500, body={"error": {"message": "boom"}}), Reply(delay=2.0)])
def test_extractor_failure_propagates_and_writes_nothing(
    service: MemoryService, llm: ScriptedLLM, reply: Reply
) -> None:
    llm.push(reply)
    with pytest.raises(ExtractorError):
        run_extraction(service, KEY, extractable(SESSION), LLMExtractor(llm.base_url, "m", timeout=0.3), session="s1",
                       now=NOW)
    assert service.read(KEY) == []


def test_garbage_tool_calls_are_rejected_per_call(service: MemoryService, llm: ScriptedLLM) -> None:
    llm.push([tool_call("memory_add", "{{{"), tool_call("memory_add", {"memory": "The project uses Go 1.23."}),
              tool_call("memory_update", {"memory_id": 7, "memory": "nope"})])
    report = run_extraction(service, KEY, extractable(SESSION), extractor(llm), session="s1", now=NOW)
    assert [r.status for r in report.results] == ["applied"]
    assert len(report.rejected) == 2 and report.counts["rejected"] == 2
    assert report.cursor == T0 + timedelta(minutes=4)


def test_an_episode_stage_failure_keeps_the_ordinary_operations(service: MemoryService, llm: ScriptedLLM) -> None:
    llm.push([tool_call("memory_add", {"memory": "The project uses Go 1.23."})],
             Reply(status=503, body={"error": {"message": "overloaded"}}))
    ex = extractor(llm)
    report = run_extraction(service, KEY, extractable(SESSION), ex, session="s1",
                            episodes=AssistantEpisodeStage(None, "scripted", chat=ex.chat), now=NOW)
    assert [r.status for r in report.results] == ["applied"]
    assert len(report.episode_errors) == 1 and "HTTP 503" in report.episode_errors[0]
    assert [e.text for e in service.read(KEY)] == ["The project uses Go 1.23."]


def test_verbatim_extraction_through_the_pipeline(service: MemoryService) -> None:
    report = run_extraction(service, KEY, extractable(SESSION), VerbatimExtractor("round"), session="s1",
                            policy="append_only", now=NOW)
    assert report.counts["applied"] == 1
    (entry,) = service.read(KEY)
    assert entry.provenance == ["s1/e1", "s1/e4"] and entry.text.startswith("User: We moved the project to Go 1.23")


def test_an_empty_delta_does_nothing(service: MemoryService, llm: ScriptedLLM) -> None:
    report = run_extraction(service, KEY, [], extractor(llm), session="s1", now=NOW)
    assert report.results == [] and report.cursor is None and llm.requests == []
