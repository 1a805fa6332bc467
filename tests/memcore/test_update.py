"""Updates keep what they were not asked to change (seed 001): every field alone, through the service
and through ``memory_update``; a topics-only change keeps the id, a content change rotates it and
carries the rest over. Tool calls are checked against the tool's own JSON schema; datetimes that
overflow once converted to UTC are bad input."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.model import Kind, MemoryPatch, UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService
from memcore.tools import execute
from memcore.vocabulary import ADD, LOAD, SEARCH, UPDATE

A = UserKey(app="app", user="alice")
WHEN = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
EPISODE = {"text": "Alice moved to Lisbon", "topics": ["home"], "kind": "episode", "event_time": WHEN.isoformat(),
           "participants": ["Alice", "Bob"], "location": "Lisbon"}
FIELDS = ("text", "topics", "kind", "event_time", "participants", "location")


def snapshot(e: Any) -> dict[str, Any]:
    return {f: getattr(e, f) for f in FIELDS}


CHANGES: list[tuple[str, Any, Any]] = [
    ("text", "Alice moved to Porto", "Alice moved to Porto"),
    ("topics", ["home", "moves"], ["home", "moves"]),
    ("kind", "fact", Kind.FACT),
    ("event_time", "2024-04-01T00:00:00Z", datetime(2024, 4, 1, tzinfo=UTC)),
    ("participants", ["Alice"], ["Alice"]),
    ("location", "Lisbon, Portugal", "Lisbon, Portugal"),
]


@pytest.mark.parametrize(("field", "given", "stored"), CHANGES)
def test_an_update_of_one_field_keeps_every_other(service: MemoryService, field: str, given: Any,
                                                  stored: Any) -> None:
    before = service.add(A, EPISODE)
    after = service.update(A, before.id, {field: given})
    expected = {**snapshot(before), field: stored}
    assert snapshot(after) == expected
    assert (after.id == before.id) == (field == "topics")  # topics are not part of the id
    assert after.created_at == before.created_at and after.source == before.source
    assert [e.id for e in service.read(A)] == [after.id]  # exactly one active entry


@pytest.mark.parametrize(("field", "given", "stored"), CHANGES)
def test_memory_update_tool_changes_only_its_arguments(service: MemoryService, field: str, given: Any,
                                                       stored: Any) -> None:
    before = service.add(A, EPISODE)
    arg = {"text": "memory", "kind": "memory_kind"}.get(field, field)
    result = execute(service, A, UPDATE, {"memory_id": before.id, arg: given}, enabled=[UPDATE])
    after = service.get(A, result["memory_id"])
    assert snapshot(after) == {**snapshot(before), field: stored}


def test_null_clears_optional_episodic_fields(service: MemoryService) -> None:
    before = service.add(A, EPISODE)
    after = service.update(A, before.id, {"location": None, "event_time": None})
    assert after.location is None and after.event_time is None and after.participants == ["Alice", "Bob"]


def test_an_empty_update_is_refused(service: MemoryService) -> None:
    before = service.add(A, EPISODE)
    for bad in ({}, {"provenance": ["e1"]}):
        with pytest.raises(ValidationError) as err:
            service.update(A, before.id, bad)
        assert "nothing to update" in err.value.message
    with pytest.raises(ValidationError) as err:
        service.update(A, before.id, {"text": None})
    assert err.value.field == "text"
    with pytest.raises(ValidationError) as tool_err:
        execute(service, A, UPDATE, {"memory_id": before.id}, enabled=[UPDATE])
    assert "nothing to update" in tool_err.value.message
    assert snapshot(service.get(A, before.id)) == snapshot(before)


def test_patch_of_a_memory_takes_only_what_it_was_given() -> None:
    from memcore.model import Memory

    patch = MemoryPatch.of(Memory(text="x", topics=["a"]))
    assert patch.changes() == {"text": "x", "topics": ["a"]}


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        (SEARCH, {"query": "x", "limit": 0}, "arguments.limit"),
        (SEARCH, {"query": "x", "limit": 1000}, "arguments.limit"),
        (SEARCH, {"query": 5}, "arguments.query"),
        (SEARCH, {}, "arguments.query"),
        (SEARCH, {"query": "x", "colour": "red"}, "arguments"),
        (LOAD, {"limit": "ten"}, "arguments.limit"),
        (ADD, {"memory": "x", "topics": "not a list"}, "arguments.topics"),
        (ADD, {"memory": "x", "memory_kind": "dream"}, "arguments.memory_kind"),
        (UPDATE, {"memory": "x"}, "arguments.memory_id"),
    ],
)
def test_tool_calls_are_checked_against_their_schema(service: MemoryService, name: str, arguments: dict[str, Any],
                                                     field: str) -> None:
    with pytest.raises(ValidationError) as err:
        execute(service, A, name, arguments, enabled=[name])
    assert err.value.field == field, err.value
    assert service.read(A) == []


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-14:00"])
def test_datetimes_that_overflow_in_utc_are_bad_input(service: MemoryService, stamp: str) -> None:
    for data, field in (({"query": "x", "time_from": stamp}, "time_from"),
                        ({"query": "x", "time_to": stamp}, "time_to")):
        with pytest.raises(ValidationError) as err:
            service.search(A, data)
        assert err.value.field == field and "out of range" in err.value.message
    with pytest.raises(ValidationError) as add_err:
        service.add(A, {"text": "x", "event_time": stamp})
    assert add_err.value.field == "event_time"
    with pytest.raises(ValidationError) as tool_err:
        execute(service, A, ADD, {"memory": "x", "event_time": stamp}, enabled=[ADD])
    assert tool_err.value.field == "arguments.event_time"
    with pytest.raises(ValueError, match="out of range"):
        SearchOptions(query="x", time_from=stamp)  # type: ignore[arg-type]
