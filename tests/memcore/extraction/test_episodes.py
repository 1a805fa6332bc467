"""The assistant-episode stage over real HTTP (scripted model, real ``openai`` client)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memcore.extraction.episodes import AssistantEpisodeStage, candidate_pairs
from memcore.extraction.events import Event
from memcore.model import Entry, Kind, Memory, Operation, Source
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, tool_call

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2025, 3, 2, tzinfo=UTC)


def ev(i: int, role: str, content: str, **kw: Any) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(minutes=i), **kw)  # type: ignore[arg-type]


STUDY = "One well-known study on mindfulness and sleep had 38 participants over 6 weeks."
CARTOON = "A classic is Nu, pogodi!, a Soviet animated series about a wolf chasing a hare."
DELTA = [
    ev(0, "assistant", "Hello! How can I help you today?"),
    ev(1, "user", "Is there research on mindfulness and sleep?"),
    ev(2, "assistant", "Let me look that up.", tool_calls=[{"id": "c1"}]),
    ev(3, "tool", "search results ..."),
    ev(4, "assistant", STUDY),
    ev(5, "user", "What is a good Soviet cartoon?"),
    ev(6, "assistant", CARTOON),
    ev(7, "user", "Thanks!"),
    ev(8, "assistant", "You're welcome."),
    ev(9, "user", "Please forget what I said about my ex."),
    ev(10, "assistant", "Understood, I will not keep anything about that conversation."),
]
TEXT_DELTA = [e for e in DELTA if e.is_text]


def stage(llm: ScriptedLLM, **kw: Any) -> AssistantEpisodeStage:
    return AssistantEpisodeStage(llm.base_url, "episode-model", **kw)


def test_candidate_pairs() -> None:
    pairs = candidate_pairs(TEXT_DELTA)
    # the leading assistant greeting has no user turn; the reply carrying tool calls is an intermediate one;
    # "You're welcome." is too short to reuse; the user asked to forget the last interaction
    assert [[e.id for e in p] for p in pairs] == [["e1", "e4"], ["e5", "e6"]]


def test_episodes_are_tied_to_their_pair_and_validated(llm: ScriptedLLM) -> None:
    llm.push([
        tool_call("assistant_episode", {"pair": 1, "memory": "The assistant told the user that a study on "
                                        "mindfulness and sleep had 38 participants.", "topics": ["research"]}),
        tool_call("assistant_episode", {"pair": "P2", "memory": "The assistant recommended the Soviet cartoon "
                                        "Nu, pogodi! about a wolf chasing a hare."}),
        tool_call("assistant_episode", {"pair": 1, "memory": "The assistant said the study had 40 participants."}),
        tool_call("assistant_episode", {"pair": 2, "memory": "Too short."}),
        tool_call("assistant_episode", {"pair": 7, "memory": "The assistant said something about pair seven."}),
        tool_call("assistant_episode", {"pair": 2, "memory": "The assistant recommended the Soviet cartoon "
                                        "Nu, pogodi! about a wolf chasing a hare!"}),
        tool_call("assistant_episode", '{"pair": 1'),
        tool_call("memory_add", {"memory": "wrong tool"}),
    ])
    result = stage(llm).run(TEXT_DELTA, now=NOW)
    assert result.error is None and result.pairs == 2
    mems = [op.memory for op in result.operations if op.memory]
    assert [m.text[:40] for m in mems] == ["The assistant told the user that a study",
                                          "The assistant recommended the Soviet car"]
    study, cartoon = mems
    assert study.provenance == ["e1", "e4"] and cartoon.provenance == ["e5", "e6"]
    assert study.kind is Kind.EPISODE and study.source is Source.ASSISTANT
    assert study.event_time == T0 + timedelta(minutes=1) and study.topics == ["research"]
    reasons = "\n".join(result.rejected)
    assert len(result.rejected) == 6
    for expected in ("number(s) 40 do not appear in pair 1", "length 10 is outside", "unknown pair 7",
                     "duplicates", "not valid JSON", "unknown tool 'memory_add'"):
        assert expected in reasons, expected
    (req,) = llm.requests
    prompt = messages_text(req, "user")
    assert "[P1]" in prompt and "[P2]" in prompt and "[P3]" not in prompt
    assert STUDY in prompt and "Let me look that up." not in prompt and "search results" not in prompt
    assert [t["function"]["name"] for t in req["tools"]] == ["assistant_episode"]


def test_duplicates_of_existing_entries_and_ordinary_operations_are_dropped(llm: ScriptedLLM) -> None:
    text = "The assistant told the user that a study on mindfulness and sleep had 38 participants."
    existing = [Entry(id="x" * 64, app="a", user="u", text=text, created_at=T0, updated_at=T0)]
    other = Operation(type="add", memory=Memory(text="The assistant recommended the Soviet cartoon Nu, pogodi!"))
    llm.push([tool_call("assistant_episode", {"pair": 1, "memory": text}),
              tool_call("assistant_episode", {"pair": 2, "memory": "The assistant recommended the Soviet "
                                                                   "cartoon Nu, pogodi!"})])
    result = stage(llm).run(TEXT_DELTA, existing, now=NOW, others=[other])
    assert result.operations == [] and len(result.rejected) == 2


def test_no_candidate_pairs_means_no_model_call(llm: ScriptedLLM) -> None:
    result = stage(llm).run([ev(1, "user", "I like tea."), ev(2, "assistant", "Ok.")], now=NOW)
    assert result.operations == [] and result.error is None and result.pairs == 0
    assert llm.requests == []


def test_pairs_are_sent_in_batches_numbered_across_batches(llm: ScriptedLLM) -> None:
    delta = []
    for i in range(3):
        delta += [ev(2 * i, "user", f"Question {i}?"),
                  ev(2 * i + 1, "assistant", f"The answer to question {i} is {i}0.")]
    llm.push([], [tool_call("assistant_episode",
                            {"pair": 3, "memory": "The assistant said question 2 has answer 20."})])
    result = stage(llm, batch_size=2).run(delta, now=NOW)
    assert len(llm.requests) == 2
    assert "[P1]" in messages_text(llm.requests[0]) and "[P3]" in messages_text(llm.requests[1])
    assert [op.memory.provenance for op in result.operations if op.memory] == [["e4", "e5"]]


@pytest.mark.parametrize("reply", [Reply(status=500, body={"error": {"message": "down"}}), Reply(delay=2.0)])
def test_a_failing_stage_returns_an_error_and_no_episodes(llm: ScriptedLLM, reply: Reply) -> None:
    llm.push(reply)
    result = stage(llm, timeout=0.3).run(TEXT_DELTA, now=NOW)
    assert result.operations == [] and result.error is not None
    assert result.error.startswith("ExtractorError: extractor: the extraction model")
