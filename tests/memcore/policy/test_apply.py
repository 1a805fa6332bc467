"""apply_operations: one op at a time, failures recorded, later ops continue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.model import Entry, Memory, Operation, UserKey
from memcore.policy.apply import DEFAULT_ENABLED, apply_operations
from memcore.ports import Vectors, VectorStore
from memcore.service import MemoryService

KEY = UserKey(app="app", user="u1")


class FailingWrites:
    """A real vector store whose writes fail for entries whose text contains ``poison`` (a disk error)."""

    def __init__(self, inner: VectorStore, poison: str) -> None:
        self.inner, self.poison = inner, poison

    def upsert(self, entries: Sequence[Entry], vectors: Vectors) -> None:
        if any(self.poison in e.text for e in entries):
            raise OSError(f"write failed: no space left on device ({self.poison})")
        self.inner.upsert(entries, vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def add(text: str) -> Operation:
    return Operation(type="add", memory=Memory(text=text))


def test_a_store_failure_fails_one_op_and_the_others_apply(service: MemoryService) -> None:
    service.vectors = FailingWrites(service.vectors, "Porto")  # type: ignore[assignment]
    ops = [add("The user lives in Lisbon."), add("The user likes green tea."), add("The user moved to Porto."),
           add("The project requires Go 1.21."), add("The user plays chess on Sundays.")]
    results = apply_operations(service, KEY, ops, "append_only")
    assert [r.status for r in results] == ["applied", "applied", "failed", "applied", "applied"]
    assert [r.index for r in results] == [0, 1, 2, 3, 4]
    failed = results[2]
    assert failed.error is not None and failed.error.startswith("StoreError: store: add failed: OSError")
    assert failed.effective_id is None
    assert sorted(e.text for e in service.read(KEY)) == [
        "The project requires Go 1.21.", "The user likes green tea.", "The user lives in Lisbon.",
        "The user plays chess on Sundays."]


def test_an_invalid_op_fails_alone(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    ops = [add("The user lives in Lisbon."), Operation(type="delete", memory_id="0" * 64),
           Operation(type="delete", memory_id=go.id), add("The user likes green tea."), Operation(type="clear")]
    results = apply_operations(service, KEY, ops, "merge_similar")
    assert [r.status for r in results] == ["applied", "failed", "applied", "applied", "skipped"]
    assert (results[1].error or "").startswith("NotFoundError: memory_id:")
    assert results[4].reason == "clear is disabled"  # Auto-mode default: clear off
    assert sorted(e.text for e in service.read(KEY)) == ["The user likes green tea.", "The user lives in Lisbon."]
    assert DEFAULT_ENABLED == {"add", "update", "delete"}


def test_clear_when_enabled(service: MemoryService) -> None:
    service.add(KEY, {"text": "The user lives in Lisbon."})
    (result,) = apply_operations(service, KEY, [Operation(type="clear")], "merge_similar",
                                 enabled={"add", "update", "delete", "clear"})
    assert result.status == "applied" and result.reason == "cleared 1 entries"
    assert service.read(KEY) == []


def test_later_ops_follow_an_id_rotated_by_an_earlier_update(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    ops = [Operation(type="update", memory=Memory(text="The project requires Go 1.23."), memory_id=go.id),
           Operation(type="update", memory=Memory(text="The project requires Go 1.24."), memory_id=go.id)]
    first, second = apply_operations(service, KEY, ops, "merge_similar")
    assert first.status == "applied" and first.effective_id != go.id
    assert second.status == "applied" and second.memory_id == first.effective_id
    assert [e.text for e in service.read(KEY)] == ["The project requires Go 1.24."]


def test_unknown_policy(service: MemoryService) -> None:
    with pytest.raises(ValidationError) as err:
        apply_operations(service, KEY, [], "forget_everything")
    assert err.value.field == "policy"
