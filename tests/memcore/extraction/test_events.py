from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.extraction.events import (
    MAX_EVENT_CONTENT_BYTES,
    Event,
    build_query,
    carries_external_context,
    cursor_of,
    extractable,
    identify,
    parse_events,
    parse_messages,
)

T0 = datetime(2025, 5, 30, 9, 0, tzinfo=UTC)


def ev(i: int, role: str = "user", content: str = "hello there", **kw: Any) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(minutes=i), **kw)  # type: ignore[arg-type]


def test_naive_timestamp_is_utc_and_aware_is_converted() -> None:
    naive = Event(id="a", role="user", content="x", timestamp=datetime(2025, 1, 1, 12))
    assert naive.timestamp == datetime(2025, 1, 1, 12, tzinfo=UTC)
    plus2 = timezone(timedelta(hours=2))
    other = Event(id="b", role="user", content="x", timestamp=datetime(2025, 1, 1, 14, tzinfo=plus2))
    assert other.timestamp == datetime(2025, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"id": "", "role": "user", "timestamp": "2025-01-01T00:00:00"}, "events.0.id", "must not be empty"),
        ({"id": "x" * 257, "role": "user", "timestamp": "2025-01-01T00:00:00"}, "events.0.id", "longer than 256"),
        ({"id": "a\x00", "role": "user", "timestamp": "2025-01-01T00:00:00"}, "events.0.id", "control"),
        ({"id": "a", "role": "robot", "timestamp": "2025-01-01T00:00:00"}, "events.0.role", "user"),
        ({"id": "a", "role": "user", "timestamp": "yesterday"}, "events.0.timestamp", "datetime"),
        ({"id": "a", "role": "user"}, "events.0.timestamp", "required"),
        ({"id": "a", "role": "user", "timestamp": "2025-01-01T00:00:00", "content": "é" * MAX_EVENT_CONTENT_BYTES},
         "events.0.content", "longer than"),
        ({"id": "a", "role": "user", "timestamp": "2025-01-01T00:00:00", "tool_calls": [{}] * 129},
         "events.0.tool_calls", "more than 128"),
        ({"id": "a", "role": "user", "timestamp": "2025-01-01T00:00:00", "colour": "red"}, "events.0.colour", "Extra"),
    ],
)
def test_event_validation_names_the_field(data: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_events([data])
    assert err.value.field == field
    assert message in err.value.message


def test_parse_events_rejects_duplicate_ids_and_accepts_wire_dicts() -> None:
    wire = {"id": "a", "role": "assistant", "content": "hi", "timestamp": "2025-01-01T00:00:00Z",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            "external_context": True}
    (event,) = parse_events([wire])
    assert event.external_context and event.tool_calls[0]["id"] == "c1"
    with pytest.raises(ValidationError) as err:
        parse_events([wire, wire])
    assert err.value.field == "events" and "duplicate event id 'a'" in err.value.message


def test_extractable_keeps_user_and_assistant_text_in_the_given_order() -> None:
    events = [
        ev(2, content="  I moved to Lisbon  "),
        ev(3, "assistant", "", tool_calls=[{"id": "c1"}]),  # tool calls only
        ev(4, "tool", "12 KB of logs", tool_call_id="c1"),  # tool result
        ev(5, "assistant", "   \n "),  # whitespace only
        ev(6, "assistant", "Let me check the weather.", tool_calls=[{"id": "c2"}]),  # text kept, calls dropped
        ev(8, "system", "You are a helpful assistant."),  # system prompts are never extracted
        ev(1, "assistant", "Lisbon is lovely."),  # arrival order, not time order
    ]
    got = extractable([*events, events[0]])
    assert [e.id for e in got] == ["e2", "e6", "e1"]
    assert got[0].text == "I moved to Lisbon"


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SKEW = timedelta(minutes=5)


def msgs(*pairs: tuple[str, str]) -> list[Any]:
    return parse_messages([{"role": r, "content": c} for r, c in pairs])


def ids(counter: list[int]) -> Any:
    def new() -> str:
        counter[0] += 1
        return f"n{counter[0]}"
    return new


def test_identify_recognises_a_resent_history_and_appends_only_new_messages() -> None:
    counter = [0]
    first = identify(msgs(("user", "I moved to Lisbon"), ("assistant", "Nice!")), [], now=NOW, max_skew=SKEW,
                     new_id=ids(counter))
    assert [e.id for e in first] == ["n1", "n2"]
    assert first[0].timestamp == NOW and first[1].timestamp == NOW + timedelta(microseconds=1)  # monotonic
    # the whole session resent, one round longer: the first two are known, the rest is new
    again = identify(msgs(("user", "I moved to Lisbon"), ("assistant", "Nice!"), ("user", "yes"), ("assistant", "ok")),
                     first, now=NOW, max_skew=SKEW, new_id=ids(counter))
    assert [e.id for e in again] == ["n1", "n2", "n3", "n4"]
    assert again[0].timestamp == first[0].timestamp and again[2].timestamp > first[1].timestamp
    # only the new messages, one repeating an earlier short text: appended all the same
    new_only = identify(msgs(("user", "yes"), ("assistant", "Done.")), again, now=NOW, max_skew=SKEW,
                        new_id=ids(counter))
    assert [e.id for e in new_only] == ["n5", "n6"]
    # a trimmed window of the history (the last two turns, then a new one)
    window = identify(msgs(("user", "yes"), ("assistant", "ok"), ("user", "bye")), again, now=NOW, max_skew=SKEW,
                      new_id=ids(counter))
    assert [e.id for e in window] == ["n3", "n4", "n7"]


def test_identify_keeps_given_ids_and_times_and_stamps_the_rest_after_the_session() -> None:
    archived = [ev(1, content="old")]
    later = T0 - timedelta(days=1)
    got = identify(parse_messages([{"id": "x", "role": "user", "content": "given", "timestamp": later.isoformat()},
                                   {"role": "assistant", "content": "stamped"}]),
                   archived, now=T0, max_skew=SKEW, new_id=lambda: "fresh")
    assert (got[0].id, got[0].timestamp) == ("x", later)
    # receipt time (T0) is before the session's newest turn: stamped just after it
    assert got[1].id == "fresh" and got[1].timestamp == archived[0].timestamp + timedelta(microseconds=1)


@pytest.mark.parametrize("stamp", ["2100-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"])
def test_identify_rejects_a_timestamp_beyond_the_clock_skew(stamp: str) -> None:
    batch = parse_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "timestamp": stamp}])
    with pytest.raises(ValidationError) as err:
        identify(batch, [], now=NOW, max_skew=SKEW)
    assert err.value.field == "events.1.timestamp" and "future" in err.value.message
    ok = parse_messages([{"role": "user", "content": "b", "timestamp": (NOW + SKEW).isoformat()}])
    assert identify(ok, [], now=NOW, max_skew=SKEW)[0].timestamp == NOW + SKEW


def test_messages_take_openai_shapes() -> None:
    (parts, call, result, system, empty) = parse_messages([
        {"role": "user", "content": [{"type": "text", "text": "Look at this"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                                     {"type": "text", "text": "my new flat"}]},
        {"role": "assistant", "content": None, "name": "helper",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"},
        {"role": "system", "content": "You are helpful."},
        {"role": "assistant"},
    ])
    assert parts.text == "Look at this\nmy new flat" and parts.ignored_parts == 1
    events = identify([parts, call, result, system, empty], [], now=NOW, max_skew=SKEW)
    assert [e.is_text for e in events] == [True, False, False, False, False]
    assert events[1].tool_calls[0]["id"] == "c1" and events[1].name == "helper"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"role": "user", "content": [{"text": "no type"}]}, "events.0.content"),
        ({"role": "user", "content": 42}, "events.0.content"),
        ({"content": "no role"}, "events.0.role"),
        ({"role": "user", "content": "x", "timestamp": "soon"}, "events.0.timestamp"),
        ({"role": "user", "content": "x", "mood": "happy"}, "events.0.mood"),
        ({"role": "user", "content": [{"type": "text", "text": "é" * MAX_EVENT_CONTENT_BYTES}]}, "events.0.content"),
    ],
)
def test_bad_messages_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_messages([{"role": "user", "content": "fine"}, data][1:])
    assert err.value.field is not None and err.value.field.startswith(field)


def test_given_message_ids_must_be_unique() -> None:
    with pytest.raises(ValidationError) as err:
        parse_messages([{"id": "a", "role": "user"}, {"id": "a", "role": "user"}, {"role": "user"}, {"role": "user"}])
    assert err.value.field == "events" and "duplicate event id 'a'" in err.value.message


def test_cursor_and_external_context() -> None:
    events = [ev(1), ev(3), ev(2)]
    assert cursor_of(events) == T0 + timedelta(minutes=3)
    assert cursor_of([]) is None
    assert not carries_external_context(events)
    assert carries_external_context([*events, ev(4, "tool", "retrieved doc", external_context=True)])


def test_build_query_uses_new_user_messages_and_is_bounded() -> None:
    events = [ev(1, content="I use Go 1.21"), ev(2, "assistant", "Noted."), ev(3, content="We moved to Go 1.23")]
    assert build_query(events) == "I use Go 1.21 We moved to Go 1.23"
    assert build_query([ev(1, "assistant", "Only the assistant   spoke")]) == "Only the assistant spoke"
    assert build_query([]) == ""
    long = [ev(i, content=f"message {i} " + "word " * 100) for i in range(30)]
    query = build_query(long, max_chars=300)
    assert len(query) <= 300
    assert query.startswith("message 29")  # the newest message comes first when the budget is short
    assert "message 0 " not in query
