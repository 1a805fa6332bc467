"""What a job extracts: the session's archived turns not extracted yet, in arrival order (never the
client's clock), and chat messages as agents hold them (no ids, no timestamps, content parts).

Real engines (Qdrant Edge, Tantivy, SQLite), the verbatim extractor or the scripted LLM over HTTP.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.fields import now_utc
from memcore.model import UserKey
from testkit.scripted_llm import ScriptedLLM, messages_text, tool_call
from tests.actors.conftest import MakeCore, done
from tests.auto_memory import extractor_settings

A = UserKey(app="app", user="alice")


def texts(core: Any, key: UserKey = A) -> list[str]:
    return sorted(e.text for e in core.read(key))


def chat(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"role": r, "content": c} for r, c in pairs]


@pytest.mark.parametrize("stamp", ["2100-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"])
def test_a_far_future_timestamp_is_refused_and_the_session_keeps_extracting(make_core: MakeCore, stamp: str) -> None:
    core = make_core()
    with pytest.raises(ValidationError) as err:
        core.ingest(A, "s1", [{"role": "user", "content": "hello"}, {"role": "user", "content": "from 2100",
                                                                    "timestamp": stamp}])
    assert err.value.field == "events.1.timestamp"
    assert core.archive.events.read(A) == []  # nothing half-written
    assert core.archive.sessions.last_extract_at(A, "s1") is None
    job = done(core, core.ingest(A, "s1", [{"role": "user", "content": "I moved to Lisbon"}]))
    assert job.status == "done" and texts(core) == ["User: I moved to Lisbon"]
    near = (now_utc() + timedelta(seconds=60)).isoformat()  # within the allowed skew
    assert done(core, core.ingest(A, "s1", [{"role": "user", "content": "soon", "timestamp": near}])).status == "done"
    assert done(core, core.ingest(A, "s1", [{"role": "user", "content": "and now"}])).status == "done"
    assert texts(core) == ["User: I moved to Lisbon", "User: and now", "User: soon"]


def test_a_late_event_is_extracted_exactly_once(make_core: MakeCore) -> None:
    core = make_core()
    t = now_utc() - timedelta(hours=1)
    first = [{"id": "e2", "role": "user", "content": "second message", "timestamp": t.isoformat()}]
    assert done(core, core.ingest(A, "s1", first)).status == "done"
    late = {"id": "e1", "role": "user", "content": "an older message, sent late",
            "timestamp": (t - timedelta(minutes=5)).isoformat()}
    equal = {"id": "e3", "role": "user", "content": "same time as the cursor", "timestamp": t.isoformat()}
    job = done(core, core.ingest(A, "s1", [*first, late, equal]))
    assert job.status == "done" and job.counts["events"] == 2
    assert texts(core) == ["User: an older message, sent late", "User: same time as the cursor", "User: second message"]
    assert core.archive.sessions.last_extract_at(A, "s1") == t  # the cursor never moves backwards
    again = core.ingest(A, "s1", [*first, late, equal])
    assert again.status == "skipped" and len(core.read(A)) == 3


def test_two_events_in_the_same_second_are_both_extracted(make_core: MakeCore) -> None:
    core = make_core()
    stamp = (now_utc() - timedelta(minutes=1)).replace(microsecond=0).isoformat()
    a = [{"id": "a", "role": "user", "content": "I like tea", "timestamp": stamp}]
    b = [{"id": "b", "role": "user", "content": "I like biscuits", "timestamp": stamp}]
    done(core, core.ingest(A, "s1", a))
    assert done(core, core.ingest(A, "s1", b)).status == "done"
    assert texts(core) == ["User: I like biscuits", "User: I like tea"]


def test_a_chat_history_resent_growing_yields_each_rounds_memories_once(make_core: MakeCore,
                                                                      scripted_llm: ScriptedLLM) -> None:
    """No ids, no timestamps: the whole history is sent after each round; each round is extracted once."""
    core = make_core(**extractor_settings(scripted_llm.base_url, policy="append_only"))
    seen: list[str] = []

    def remember_user_lines(request: dict[str, Any]) -> list[Any]:
        conversation = messages_text(request, "user").split("New conversation", 1)[-1]
        found = re.findall(r"round \d+: my fact number \d+", conversation)
        seen.append(conversation)
        return [tool_call("memory_add", {"memory": f"The user said: {f}"}) for f in found]

    scripted_llm.push(*([remember_user_lines] * 3))
    rounds = [("user", f"round {i}: my fact number {i}") for i in range(3)]
    history: list[dict[str, Any]] = []
    for i, said in enumerate(rounds):
        history += chat(said, ("assistant", "yes"))
        job = done(core, core.ingest(A, "chat", list(history)))
        assert job.status == "done" and job.counts["events"] == 2, job
        assert f"round {i}" in seen[-1] and all(f"round {k}:" not in seen[-1] for k in range(i))
    assert texts(core) == [f"The user said: round {i}: my fact number {i}" for i in range(3)]
    assert len(scripted_llm.requests) == 3
    assert core.ingest(A, "chat", list(history)).status == "skipped"  # nothing new the fourth time
    assert [e.content for e in core.archive.events.arrived(A, "chat")] == [
        m["content"] for m in history]  # the repeated "yes" is archived once per round


def test_sending_only_new_messages_appends_them_even_when_they_repeat(make_core: MakeCore) -> None:
    core = make_core()
    done(core, core.ingest(A, "s1", chat(("user", "Do you want tea?"), ("assistant", "yes"))))
    done(core, core.ingest(A, "s1", chat(("user", "Biscuits too?"), ("assistant", "yes"))))
    assert [e.content for e in core.archive.events.arrived(A, "s1")] == ["Do you want tea?", "yes", "Biscuits too?",
                                                                        "yes"]
    stamps = [e.timestamp for e in core.archive.events.arrived(A, "s1")]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4  # receipt times, monotonic in the session


def test_content_parts_and_tool_calls(make_core: MakeCore) -> None:
    core = make_core()
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Here is my flat in Lisbon"},
                                     {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\":\"Lisbon\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "SECRET-TOOL-OUTPUT 21C"},
        {"role": "assistant", "content": "It is 21C in Lisbon today."},
    ]
    job = core.ingest(A, "s1", messages)
    assert job.counts["ignored_content_parts"] == 1
    job = done(core, job)
    assert job.status == "done" and job.counts["ignored_content_parts"] == 1
    assert texts(core) == ["Assistant: It is 21C in Lisbon today.", "User: Here is my flat in Lisbon"]
    assert [e.content for e in core.archive.events.arrived(A, "s1")] == ["Here is my flat in Lisbon",
                                                                  "It is 21C in Lisbon today."]
    assert not any("SECRET-TOOL-OUTPUT" in e.text for e in core.read(A))
