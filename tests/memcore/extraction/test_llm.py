"""The LLM extractor over real HTTP: the real ``openai`` client against the scripted server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import openai
import pytest

from memcore.errors import ExtractorError
from memcore.extraction.events import Event
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.prompts import POLICY_INSTRUCTIONS
from memcore.model import Entry, Kind
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, small_id, small_ids, tool_call

T0 = datetime(2025, 6, 16, 10, 0, tzinfo=UTC)
NOW = datetime(2025, 6, 16, 12, 0, tzinfo=UTC)
DELTA = [
    Event(id="u1", role="user", content="I'm writing a new story; I aim for 500 words a week.", timestamp=T0),
    Event(id="a1", role="assistant", content="That's a great goal!", timestamp=T0 + timedelta(seconds=5)),
]


def entry(n: int, text: str, **kw: Any) -> Entry:
    return Entry(id=f"{n:064x}", app="app", user="u", text=text, created_at=T0, updated_at=T0, **kw)


EXISTING = [
    entry(1, "The user has completed seven short stories.", topics=["writing"]),
    entry(2, "Alice visited Bob on December 1st, 2025.", kind=Kind.EPISODE,
          event_time=datetime(2025, 12, 1, tzinfo=UTC), participants=["Alice", "Bob"], location="Paris"),
    entry(3, "The user lives in Lisbon."),
]


def make(llm: ScriptedLLM, **kw: Any) -> LLMExtractor:
    return LLMExtractor(llm.base_url, "extract-model", **kw)


@pytest.mark.parametrize("policy", ["merge_similar", "append_only", "preserve_history"])
def test_prompt_shows_small_ids_policy_and_current_date(llm: ScriptedLLM, policy: str) -> None:
    llm.push([])
    result = make(llm, policy=policy).extract(DELTA, EXISTING, now=NOW)
    assert result.operations == [] and result.rejected == []
    (req,) = llm.requests
    assert req["model"] == "extract-model" and req["tool_choice"] == "auto" and req["temperature"] == 0
    assert [t["function"]["name"] for t in req["tools"]] == ["memory_add", "memory_update", "memory_delete",
                                                              "memory_clear"]
    update = req["tools"][1]["function"]["parameters"]
    assert update["required"] == ["memory_id", "memory"] and update["properties"]["memory_id"]["type"] == "integer"
    assert set(req["tools"][0]["function"]["parameters"]["properties"]) == {
        "memory", "topics", "memory_kind", "event_time", "participants", "location"}
    system = messages_text(req, "system")
    assert POLICY_INSTRUCTIONS[policy] in system
    assert all(POLICY_INSTRUCTIONS[p] not in system for p in POLICY_INSTRUCTIONS if p != policy)
    assert "2025-06-16T12:00:00Z" in system
    user = messages_text(req, "user")
    assert small_ids(req) == {
        1: "The user has completed seven short stories. | topics: writing",
        2: "Alice visited Bob on December 1st, 2025. | event_time: 2025-12-01T00:00:00Z; "
           "participants: Alice, Bob; location: Paris",
        3: "The user lives in Lisbon.",
    }
    assert EXISTING[0].id not in user  # real ids never reach the model
    assert "[2025-06-16T10:00:00Z] User: I'm writing a new story; I aim for 500 words a week." in user
    assert "Assistant: That's a great goal!" in user


def test_small_ids_are_mapped_back_to_real_ids(llm: ScriptedLLM) -> None:
    llm.push(lambda req: [
        tool_call("memory_add", {"memory": "The user aims to write 500 words a week.", "topics": ["writing"]}),
        tool_call("memory_update", {"memory_id": small_id(req, "Alice visited"),
                                    "memory": "Alice visited Bob at 4pm on December 1st, 2025.",
                                    "event_time": "2025-12-01T16:00:00Z"}),
        tool_call("memory_delete", {"memory_id": "[3]"}),
        tool_call("memory_clear", {}),
    ])
    result = make(llm).extract(DELTA, EXISTING, now=NOW)
    assert result.rejected == []
    add, update, delete, clear = result.operations
    assert add.type == "add" and add.memory is not None
    assert add.memory.topics == ["writing"] and add.memory.provenance == ["u1", "a1"]
    assert update.type == "update" and update.memory_id == EXISTING[1].id and update.memory is not None
    # metadata the model left out is kept from the target (kind, participants, location)
    assert update.memory.kind is Kind.EPISODE and update.memory.participants == ["Alice", "Bob"]
    assert update.memory.location == "Paris" and update.memory.event_time == datetime(2025, 12, 1, 16, tzinfo=UTC)
    assert delete.type == "delete" and delete.memory_id == EXISTING[2].id
    assert clear.type == "clear"


def test_malformed_tool_calls_are_rejected_one_by_one(llm: ScriptedLLM) -> None:
    llm.push([
        tool_call("memory_add", {"memory": "The user aims to write 500 words a week."}),
        tool_call("memory_add", '{"memory": "unterminated'),
        tool_call("memory_forget", {"memory_id": 1}),
        tool_call("memory_update", {"memory_id": 9, "memory": "The user lives in Porto."}),
        tool_call("memory_delete", {"memory_id": "seven"}),
        tool_call("memory_add", {"memory": "   "}),
        tool_call("memory_add", {"memory": "A trip", "memory_kind": "episode", "event_time": "last Tuesday"}),
        tool_call("memory_update", {"memory": "no id given"}),
        tool_call("memory_add", "[1, 2]"),
        tool_call("memory_add", {"memory": 42}),
        tool_call("memory_update", {"memory_id": 3, "memory": "The user lives in Porto."}),
    ])
    result = make(llm).extract(DELTA, EXISTING, now=NOW)
    assert [(op.type, op.memory.text if op.memory else None) for op in result.operations] == [
        ("add", "The user aims to write 500 words a week."),
        ("update", "The user lives in Porto."),
    ]
    assert result.operations[1].memory_id == EXISTING[2].id
    assert len(result.rejected) == 9
    reasons = "\n".join(result.rejected)
    for expected in ("tool call 2 (memory_add", "not valid JSON", "unknown tool 'memory_forget'",
                     "unknown memory_id 9 (existing memories are numbered 1..3)", "unknown memory_id 'seven'",
                     "memory text must not be empty", "arguments.event_time", "memory_id is required",
                     "must be a JSON object", "memory must be a string"):
        assert expected in reasons, expected


def test_tools_can_be_restricted(llm: ScriptedLLM) -> None:
    llm.push([tool_call("memory_clear", {}), tool_call("memory_add", {"memory": "The user likes tea."})])
    result = make(llm, tools=("memory_add", "memory_update", "memory_delete")).extract(DELTA, [], now=NOW)
    assert [op.type for op in result.operations] == ["add"]
    assert "unknown tool 'memory_clear'" in result.rejected[0]
    assert "memory_clear" not in messages_text(llm.requests[0], "system")


def test_text_answer_without_tool_calls_is_no_operation(llm: ScriptedLLM) -> None:
    llm.push("Nothing worth remembering.")
    assert make(llm).extract(DELTA, EXISTING, now=NOW).operations == []


def test_http_500_raises_extractor_error(llm: ScriptedLLM) -> None:
    llm.push(Reply(status=500, body={"error": {"message": "model crashed", "type": "server_error"}}))
    with pytest.raises(ExtractorError) as err:
        make(llm).extract(DELTA, EXISTING, now=NOW)
    assert err.value.status_code == 502 and err.value.field == "extractor"
    assert "HTTP 500" in err.value.message
    assert len(llm.requests) == 1  # no retries inside the extractor: the job owns retries


def test_timeout_raises_extractor_error(llm: ScriptedLLM) -> None:
    llm.push(Reply(content="too late", delay=2.0))
    with pytest.raises(ExtractorError, match=r"timed out after 0\.3 s"):
        make(llm, timeout=0.3).extract(DELTA, EXISTING, now=NOW)


@pytest.mark.parametrize("body", [b"<html>garbage</html>", {"unexpected": True}, {"choices": []}])
def test_garbage_answers_raise_extractor_error(llm: ScriptedLLM, body: Any) -> None:
    llm.push(Reply(body=body))
    with pytest.raises(ExtractorError):
        make(llm).extract(DELTA, EXISTING, now=NOW)


def test_unreachable_endpoint_raises_extractor_error() -> None:
    with ScriptedLLM() as gone:
        url = gone.base_url
    with pytest.raises(ExtractorError, match="failed"):
        LLMExtractor(url, "m", timeout=2).extract(DELTA, [], now=NOW)


def test_model_callbacks_see_and_may_replace_request_and_response(llm: ScriptedLLM) -> None:
    seen: dict[str, Any] = {}

    def before(request: dict[str, Any]) -> dict[str, Any]:
        seen["request"] = request
        return {**request, "model": "rewritten-model"}

    def after(response: Any) -> Any:
        seen["response"] = response
        return None  # keep it

    llm.push(tool_call("memory_add", {"memory": "The user aims to write 500 words a week."}))
    result = make(llm, before_model=before, after_model=after).extract(DELTA, [], now=NOW)
    assert seen["request"]["model"] == "extract-model" and "tools" in seen["request"]
    assert llm.requests[0]["model"] == "rewritten-model"
    assert seen["response"].choices[0].finish_reason == "tool_calls"
    assert len(result.operations) == 1

    llm.push("ignored")
    forged = openai.types.chat.ChatCompletion.model_validate({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "memory_add",
                                                         "arguments": '{"memory": "Forged by a callback."}'}}]}}]})
    result = make(llm, after_model=lambda _: forged).extract(DELTA, [], now=NOW)
    assert [op.memory.text for op in result.operations if op.memory] == ["Forged by a callback."]


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="policy"):
        LLMExtractor("http://127.0.0.1:9/v1", "m", policy="forget_all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base_url"):
        LLMExtractor(None, "m")
    with pytest.raises(ValueError, match="model"):
        LLMExtractor("http://127.0.0.1:9/v1", "")
    with pytest.raises(ValueError, match="tools"):
        LLMExtractor("http://127.0.0.1:9/v1", "m", tools=("memory_search",))
