from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memcore.errors import ValidationError
from memcore.fields import MAX_TEXT_BYTES
from memcore.model import Entry, Kind, Memory, Operation, UserKey
from memcore.relevance import floor_of
from memcore.search_model import SearchOptions
from memcore.validation import make_key, validate


@pytest.mark.parametrize(
    ("app", "user", "field"),
    [("", "u", "app"), ("a", "", "user"), ("a" * 129, "u", "app"), ("a", "u\x00", "user"), ("a\n", "u", "app"),
     ("a", " u", "user"), ("a/b", "u", "app")],
)
def test_user_key_rejects_bad_ids(app: str, user: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        make_key(app, user)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        ({"text": "   "}, "text", "empty"),
        ({"text": "x" * (MAX_TEXT_BYTES + 1)}, "text", "8192"),
        ({"text": "x", "topics": [f"t{i}" for i in range(33)]}, "topics", "32"),
        ({"text": "x", "kind": "opinion"}, "kind", ""),
        ({"text": "x", "event_time": "last tuesday"}, "event_time", ""),
        ({"text": "x", "colour": "red"}, "colour", ""),
    ],
)
def test_memory_validation_names_field(data: dict[str, object], field: str, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate(Memory, data)
    assert info.value.field == field
    assert needle in info.value.message


def test_memory_normalises_values() -> None:
    m = Memory(text="  hi  ", topics=["a", " a ", "", "b"], event_time=datetime(2024, 1, 1, 8), location="  ")
    assert m.text == "hi" and m.topics == ["a", "b"] and m.location is None
    assert m.event_time == datetime(2024, 1, 1, 8, tzinfo=UTC)


def test_entry_payload_roundtrip() -> None:
    now = datetime(2025, 2, 3, 4, 5, 6, tzinfo=UTC)
    e = Entry(id="x", app="a", user="u", text="t", kind=Kind.EPISODE, event_time=now, participants=["A"],
              location="L", provenance=["D1:2"], created_at=now, updated_at=now)
    p = e.to_payload()
    assert p["event_ts"] == now.timestamp() and p["deleted"] is False
    assert Entry.from_payload(p) == e
    assert e.memory().text == "t" and e.key == UserKey(app="a", user="u")


def test_search_options_validation() -> None:
    with pytest.raises(ValidationError) as info:
        validate(SearchOptions, {"query": "q", "max_results": 0})
    assert info.value.field == "max_results"
    with pytest.raises(ValidationError):
        validate(SearchOptions, {"query": "q", "time_from": "2025-01-02", "time_to": "2025-01-01"})
    assert SearchOptions().max_results == 10 and SearchOptions().similarity_threshold is None
    assert floor_of(SearchOptions().similarity_threshold, hybrid=False) == 0.3  # the seeds' dense default
    assert floor_of(SearchOptions().similarity_threshold, hybrid=True) is None
    with pytest.raises(ValidationError) as info:
        validate(SearchOptions, {"query": "q", "similarity_threshold": 1.5})
    assert info.value.field == "similarity_threshold"


def test_operation_shape() -> None:
    with pytest.raises(ValidationError) as info:
        validate(Operation, {"type": "update", "memory": {"text": "x"}})
    assert "memory_id" in info.value.message
    assert Operation(type="clear").memory is None
