"""The seed scenarios end to end through run_extraction: scripted model over real HTTP, real stores.

The scripted model answers the same way under every policy, so what differs is what the
worker's policy does with the proposal (the seeds: "the worker applies the same policy to
remove duplicates and prevent an update from silently losing old information").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from memcore.extraction.episodes import AssistantEpisodeStage
from memcore.extraction.events import Event, extractable
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.pipeline import ExtractionReport, run_extraction
from memcore.model import UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService
from testkit.scripted_llm import ScriptedLLM, small_id, tool_call
from tests.seed_scenarios import (
    ASSISTANT_TURNS,
    DEC2,
    EPISODES,
    GO21,
    GO23,
    GO_AFTER_UPDATE,
    GOAL,
    GOAL_TURNS,
    JUN16,
    LOOKALIKES,
    MAR1,
    MAY30,
    ORDINARY,
    QUESTIONS,
    STORIES,
    STORIES_TURNS,
    VISIT,
    VISIT_4PM,
)

KEY = UserKey(app="app", user="writer")


def session(day: datetime, *turns: tuple[str, str]) -> list[Event]:
    return [Event(id=f"{day:%m%d}-{i}", role=role, content=text, timestamp=day + timedelta(minutes=i))  # type: ignore[arg-type]
            for i, (role, text) in enumerate(turns)]


def run(service: MemoryService, llm: ScriptedLLM, events: Sequence[Event], policy: str,
        *, episodes: bool = False) -> ExtractionReport:
    extractor = LLMExtractor(llm.base_url, "scripted", policy=policy)  # type: ignore[arg-type]
    stage = AssistantEpisodeStage(None, "scripted", chat=extractor.chat) if episodes else None
    report = run_extraction(service, KEY, extractable(events), extractor, session="s1", policy=policy,
                            episodes=stage, now=events[-1].timestamp + timedelta(minutes=5))
    assert report.cursor == events[-1].timestamp
    assert report.rejected == [] and report.episode_errors == []
    return report


def texts(service: MemoryService) -> list[str]:
    return sorted(e.text for e in service.read(KEY))


def found(service: MemoryService, query: str, needle: str) -> bool:
    hits = service.search(KEY, SearchOptions(query=query, max_results=3))
    return any(needle in h.entry.text for h in hits)


# --------------------------------------------------------------- seven short stories


def _stories(service: MemoryService, llm: ScriptedLLM, policy: str) -> list[ExtractionReport]:
    llm.push([tool_call("memory_add", {"memory": STORIES, "topics": ["writing"]})])
    first = run(service, llm, session(MAY30, *STORIES_TURNS), policy)
    llm.push(lambda req: [tool_call("memory_update", {"memory_id": small_id(req, "seven short stories"),
                                                      "memory": GOAL, "topics": ["writing", "goals"]})])
    second = run(service, llm, session(JUN16, *GOAL_TURNS), policy)
    return [first, second]


def test_seven_stories_survive_the_weekly_goal_under_preserve_history(service: MemoryService, llm: ScriptedLLM) -> None:
    _, second = _stories(service, llm, "preserve_history")
    (result,) = second.results
    assert result.action == "add" and "not an enrichment" in (result.reason or "")
    assert texts(service) == [STORIES, GOAL]
    assert found(service, "How many short stories has the user completed?", "seven")


def test_seven_stories_are_lost_under_merge_similar(service: MemoryService, llm: ScriptedLLM) -> None:
    _, second = _stories(service, llm, "merge_similar")
    assert second.results[0].action == "update"
    assert texts(service) == [GOAL]
    assert not any("seven" in t for t in texts(service))


# --------------------------------------------------------------- Go 1.21 -> 1.23


@pytest.mark.parametrize(("policy", "expected"), GO_AFTER_UPDATE)
def test_go_version_update_under_each_policy(service: MemoryService, llm: ScriptedLLM, policy: str,
                                             expected: list[str]) -> None:
    llm.push([tool_call("memory_add", {"memory": GO21, "topics": ["go"]})])
    run(service, llm, session(MAY30, ("user", "Our project needs at least Go 1.21.")), policy)
    llm.push(lambda req: [tool_call("memory_update", {"memory_id": small_id(req, "Go 1.21"), "memory": GO23})])
    run(service, llm, session(JUN16, ("user", "We raised the minimum to Go 1.23.")), policy)
    assert texts(service) == expected


@pytest.mark.parametrize(("policy", "expected"), [
    ("merge_similar", [GO23]),  # reconcile: Jaccard 0.67 is the update tier
    ("append_only", [GO21, GO23]),
    ("preserve_history", [GO21, GO23]),
])
def test_go_version_proposed_as_an_add(service: MemoryService, llm: ScriptedLLM, policy: str,
                                       expected: list[str]) -> None:
    service.add(KEY, {"text": GO21})
    llm.push([tool_call("memory_add", {"memory": GO23})])
    run(service, llm, session(JUN16, ("user", "We raised the minimum to Go 1.23.")), policy)
    assert texts(service) == expected


# --------------------------------------------------------------- changed facts that look alike
@pytest.mark.parametrize(("old", "new"), LOOKALIKES)
def test_changed_facts_are_not_merged(service: MemoryService, llm: ScriptedLLM, old: str, new: str) -> None:
    llm.push([tool_call("memory_add", {"memory": old})])
    run(service, llm, session(MAY30, ("user", old)), "preserve_history")
    llm.push([tool_call("memory_add", {"memory": new})],  # proposed as an add ...
             lambda req: [tool_call("memory_update", {"memory_id": small_id(req, old.rstrip(".")),
                                                      "memory": new})])  # ... and as an update
    first = run(service, llm, session(JUN16, ("user", new)), "preserve_history")
    assert first.results[0].action == "add"
    assert texts(service) == sorted([old, new])
    second = run(service, llm, session(JUN16 + timedelta(days=1), ("user", new)), "preserve_history")
    assert second.results[0].status == "skipped"  # the new version now exists: an exact duplicate
    assert texts(service) == sorted([old, new])


def test_merge_similar_does_collapse_them(service: MemoryService, llm: ScriptedLLM) -> None:
    """The contrast: reconcile's Jaccard sees the same words and drops the change (why preserve_history exists)."""
    service.add(KEY, {"text": "Alice manages Bob."})
    llm.push([tool_call("memory_add", {"memory": "Bob manages Alice."})])
    report = run(service, llm, session(JUN16, ("user", "Bob manages Alice now.")), "merge_similar")
    assert report.results[0].status == "skipped"
    assert texts(service) == ["Alice manages Bob."]


# --------------------------------------------------------------- enrichment of the same event
@pytest.mark.parametrize("form", ["add", "update"])
def test_visit_enriched_with_4pm_is_merged(service: MemoryService, llm: ScriptedLLM, form: str) -> None:
    llm.push([tool_call("memory_add", VISIT)])
    run(service, llm, session(DEC2, ("user", "Alice visited Bob yesterday.")), "preserve_history")
    (old,) = service.read(KEY)
    if form == "add":
        llm.push([tool_call("memory_add", VISIT_4PM)])
    else:
        llm.push(lambda req: [tool_call("memory_update", {**VISIT_4PM, "memory_id": small_id(req, "Alice visited")})])
    report = run(service, llm, session(DEC2 + timedelta(hours=2), ("user", "Oh, and the visit was at 4pm.")),
                 "preserve_history")
    (result,) = report.results
    assert result.action == "update" and result.memory_id == old.id
    (entry,) = service.read(KEY)
    assert entry.text == VISIT_4PM["memory"] and entry.event_time == datetime(2025, 12, 1, 16, tzinfo=UTC)
    assert entry.participants == ["Alice", "Bob"] and entry.created_at == old.created_at


# --------------------------------------------------------------- assistant-only information
ASSISTANT_SESSION = session(MAR1, *ASSISTANT_TURNS)


def test_assistant_details_are_lost_without_the_episode_stage(service: MemoryService, llm: ScriptedLLM) -> None:
    llm.push(ORDINARY)
    run(service, llm, ASSISTANT_SESSION, "preserve_history")
    assert len(texts(service)) == 2
    for question, answer in QUESTIONS:
        assert not found(service, question, answer)
        assert not any(answer in t for t in texts(service))


def test_assistant_details_are_recoverable_with_the_episode_stage(service: MemoryService, llm: ScriptedLLM) -> None:
    llm.push(ORDINARY, EPISODES)
    report = run(service, llm, ASSISTANT_SESSION, "preserve_history", episodes=True)
    assert report.counts["episodes"] == 2 and report.counts["applied"] == 4
    episodes = [e for e in service.read(KEY) if e.source.value == "assistant"]
    assert len(episodes) == 2 and all(e.kind.value == "episode" for e in episodes)
    assert sorted(e.provenance for e in episodes) == [["s1/0301-0", "s1/0301-1"], ["s1/0301-2", "s1/0301-3"]]
    for question, answer in QUESTIONS:
        assert found(service, question, answer), question

