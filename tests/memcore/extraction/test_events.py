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
    delta,
    parse_events,
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
        ({"id": "a", "role": "system", "timestamp": "2025-01-01T00:00:00"}, "events.0.role", "user"),
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


def test_delta_keeps_user_and_assistant_text_after_the_cursor_only() -> None:
    events = [
        ev(0, content="before the cursor"),
        ev(1, content="exactly at the cursor"),
        ev(2, content="  I moved to Lisbon  "),
        ev(3, "assistant", "", tool_calls=[{"id": "c1"}]),  # tool calls only
        ev(4, "tool", "12 KB of logs", tool_call_id="c1"),  # tool result
        ev(5, "assistant", "   \n "),  # whitespace only
        ev(6, "assistant", "Let me check the weather.", tool_calls=[{"id": "c2"}]),  # text kept, calls dropped
        ev(7, "assistant", "Lisbon is lovely."),
    ]
    cursor = events[1].timestamp
    got = delta(events, cursor)
    assert [e.id for e in got] == ["e2", "e6", "e7"]
    assert got[0].text == "I moved to Lisbon"
    assert [e.id for e in delta(events, None)] == ["e0", "e1", "e2", "e6", "e7"]
    assert delta(events, events[-1].timestamp) == []
    # a naive cursor is UTC
    assert [e.id for e in delta(events, cursor.replace(tzinfo=None))] == ["e2", "e6", "e7"]


def test_delta_orders_by_time_and_drops_repeated_ids() -> None:
    late, early = ev(5, content="second"), ev(1, content="first")
    assert [e.id for e in delta([late, early, late], None)] == ["e1", "e5"]


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
