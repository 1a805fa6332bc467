"""The three update policies, planned against a real store (Qdrant Edge / qdrant-client + Tantivy)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from memcore.model import Entry, Kind, Memory, Operation, UserKey
from memcore.policy.apply import apply_operations
from memcore.policy.preserve_history import enrich_failure, is_exact_duplicate, new_share
from memcore.records import OpResult
from memcore.service import MemoryService

KEY = UserKey(app="app", user="u1")
DEC1 = datetime(2025, 12, 1, tzinfo=UTC)


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    """This logic does not depend on the backend: the in-memory qdrant-client store is enough here
    (the seed scenarios and apply tests run on both backends)."""
    return make_service("server")


def add(text: str, **kw: Any) -> Operation:
    return Operation(type="add", memory=Memory(text=text, **kw))


def update(entry_id: str, text: str, **kw: Any) -> Operation:
    return Operation(type="update", memory=Memory(text=text, **kw), memory_id=entry_id)


def texts(service: MemoryService) -> list[str]:
    return sorted(e.text for e in service.read(KEY))


def one(service: MemoryService, op: Operation, policy: str, **kw: Any) -> OpResult:
    (result,) = apply_operations(service, KEY, [op], policy, **kw)
    return result


# ------------------------------------------------------------------ merge_similar
def test_merge_similar_skips_duplicates_updates_similar_and_keeps_new(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21.", "topics": ["go"]})
    dup = one(service, add("The project requires Go 1.21."), "merge_similar")
    assert dup.status == "skipped" and dup.effective_id == go.id and "duplicate of" in (dup.reason or "")
    similar = one(service, add("The project requires Go 1.23."), "merge_similar")  # Jaccard 0.67: update tier
    assert similar.status == "applied" and similar.action == "update" and similar.memory_id == go.id
    assert texts(service) == ["The project requires Go 1.23."]
    assert service.get(KEY, similar.effective_id or "").topics == ["go"]  # topics merged, not lost
    new = one(service, add("The user lives in Lisbon."), "merge_similar")
    assert new.status == "applied" and new.action == "add"
    assert texts(service) == ["The project requires Go 1.23.", "The user lives in Lisbon."]


def test_merge_similar_duplicate_with_new_topics_only_adds_the_topics(service: MemoryService) -> None:
    tea = service.add(KEY, {"text": "The user likes green tea.", "topics": ["drinks"]})
    result = one(service, add("The user likes green tea!", topics=["tea"]), "merge_similar")
    assert result.action == "update" and result.effective_id == tea.id
    stored = service.get(KEY, tea.id)
    assert stored.text == "The user likes green tea." and stored.topics == ["drinks", "tea"]


def test_merge_similar_update_missing_target_falls_back_to_add(service: MemoryService) -> None:
    result = one(service, update("f" * 64, "The user lives in Porto."), "merge_similar")
    assert result.status == "applied" and result.action == "add" and "not found" in (result.reason or "")
    assert texts(service) == ["The user lives in Porto."]


def test_merge_similar_with_update_disabled_keeps_the_add(service: MemoryService) -> None:
    service.add(KEY, {"text": "The project requires Go 1.21."})
    result = one(service, add("The project requires Go 1.23."), "merge_similar", enabled={"add"})
    assert result.action == "add" and "update is disabled" in (result.reason or "")
    assert len(texts(service)) == 2
    proposed = one(service, update(service.read(KEY)[0].id, "x y z"), "merge_similar", enabled={"add"})
    assert proposed.status == "skipped" and "update is disabled" in (proposed.reason or "")


def test_a_failed_reconcile_search_keeps_the_add(service: MemoryService) -> None:
    service.add(KEY, {"text": "The project requires Go 1.21."})
    real = service.embedder

    class QueriesDown:
        dim, name = real.dim, "queries-down"

        def embed_passages(self, texts: Any) -> Any:
            return real.embed_passages(texts)

        def embed_queries(self, texts: Any) -> Any:
            raise RuntimeError("query encoder down")

    service.embedder = QueriesDown()  # type: ignore[assignment]
    result = one(service, add("The project requires Go 1.21!"), "merge_similar")
    assert result.status == "applied" and result.action == "add" and "search failed" in (result.reason or "")
    assert len(texts(service)) == 2


# ------------------------------------------------------------------ append_only
def test_append_only_turns_update_into_add_and_drops_exact_duplicates(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    upd = one(service, update(go.id, "The project requires Go 1.23."), "append_only")
    assert upd.status == "applied" and upd.action == "add" and "into add" in (upd.reason or "")
    assert texts(service) == ["The project requires Go 1.21.", "The project requires Go 1.23."]
    dup = one(service, add("the project  requires Go 1.21.", topics=["new-topic"]), "append_only")
    assert dup.status == "skipped" and dup.effective_id == go.id and "exact duplicate" in (dup.reason or "")
    near = one(service, add("The project requires Go 1.21 today."), "append_only")  # similar is not a duplicate
    assert near.status == "applied" and len(texts(service)) == 3


def test_append_only_skips_extractor_delete_and_clear(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    results = apply_operations(service, KEY, [Operation(type="delete", memory_id=go.id), Operation(type="clear")],
                               "append_only", enabled={"add", "update", "delete", "clear"})
    assert [r.status for r in results] == ["skipped", "skipped"]
    assert all("append_only skips" in (r.reason or "") for r in results)
    assert texts(service) == ["The project requires Go 1.21."]


# ------------------------------------------------------------------ preserve_history
OLD = Memory(text="Alice visited Bob on December 1st, 2025.", kind=Kind.EPISODE, event_time=DEC1,
             participants=["Alice", "Bob"], location="Paris")
LONG = ("On December 1st 2025 Alice visited Bob at his new flat in the old town "
        "and they talked about books music and food")


def _new(text: str = "Alice visited Bob at 4pm on December 1st, 2025.", **kw: Any) -> Memory:
    data: dict[str, Any] = {"text": text, "kind": Kind.EPISODE, "event_time": DEC1.replace(hour=16),
                            "participants": ["Alice", "Bob", "Carol"], "location": "paris", **kw}
    return Memory(**data)


@pytest.mark.parametrize(
    ("old", "new", "failure"),
    [
        (OLD, _new(), None),
        (OLD, _new(kind=Kind.FACT), "different kind (episode vs fact)"),
        (OLD, _new(event_time=datetime(2025, 12, 2, 16, tzinfo=UTC)), "different day"),
        (OLD, _new(event_time=None), "different day"),
        (OLD, _new(location="Lyon"), "different location"),
        (OLD, _new(participants=["Alice"]), "participants dropped: bob"),
        (OLD, _new("Alice visited Bob on December 1st."), "old-token coverage 0.86 < 0.95"),
        (OLD, _new("Alice visited Bob on December 1st, 2025, and they cooked a big dinner together at home."),
         "new-token share 0.44 < 0.7"),
        (Memory(text=LONG), Memory(text=LONG.replace(" 2025", "")), "number(s) dropped: 2025"),
        (Memory(text=LONG), Memory(text=LONG.replace("talked", "never talked")), "negation changed"),
        (Memory(text=LONG), Memory(text=LONG.replace("they talked", "they now talked")), "new change marker(s): now"),
        (Memory(text="Alice manages Bob."), Memory(text="Bob manages Alice."), "old tokens out of order"),
        (Memory(text="The newsletter is published every Wednesday."),
         Memory(text="The newsletter is no longer published every Wednesday."), "negation changed"),
    ],
)
def test_enrich_checks(old: Memory, new: Memory, failure: str | None) -> None:
    got = enrich_failure(old, new)
    assert got == failure if failure is None else (got or "").startswith(failure), got


def test_enrich_helpers() -> None:
    assert new_share("a b c", "a b c d") == 0.75
    same = OLD.model_copy(update={"topics": ["x"], "text": "alice visited  bob on december 1st, 2025."})
    assert is_exact_duplicate(OLD, same)
    assert not is_exact_duplicate(OLD, OLD.model_copy(update={"location": "Lyon"}))
    assert not is_exact_duplicate(OLD, OLD.model_copy(update={"participants": ["Alice"]}))


def test_preserve_history_enriches_the_same_event_in_place(service: MemoryService) -> None:
    old = service.add(KEY, OLD.model_copy(update={"topics": ["visits"]}))
    result = one(service, add(**_new(topics=["time"]).model_dump()), "preserve_history")
    assert result.status == "applied" and result.action == "update" and result.memory_id == old.id
    (entry,) = service.read(KEY)
    assert entry.text == "Alice visited Bob at 4pm on December 1st, 2025." and entry.id == result.effective_id
    assert entry.topics == ["visits", "time"] and entry.participants == ["Alice", "Bob", "Carol"]


def test_preserve_history_skips_exact_duplicates(service: MemoryService) -> None:
    old = service.add(KEY, OLD)
    result = one(service, Operation(type="add", memory=OLD.model_copy(update={"topics": ["other"]})),
                 "preserve_history")
    assert result.status == "skipped" and result.effective_id == old.id
    assert service.get(KEY, old.id).topics == []  # nothing written


def test_preserve_history_update_that_changes_a_fact_becomes_an_add(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    result = one(service, update(go.id, "The project requires Go 1.23."), "preserve_history")
    assert result.status == "applied" and result.action == "add"
    assert "not an enrichment (old-token coverage 0.80 < 0.95)" in (result.reason or "")
    assert texts(service) == ["The project requires Go 1.21.", "The project requires Go 1.23."]


def test_preserve_history_update_that_enriches_is_applied(service: MemoryService) -> None:
    old = service.add(KEY, OLD)
    result = one(service, update(old.id, **_new().model_dump()), "preserve_history")
    assert result.action == "update" and result.memory_id == old.id
    assert texts(service) == ["Alice visited Bob at 4pm on December 1st, 2025."]


def test_preserve_history_update_of_a_missing_target_is_added(service: MemoryService) -> None:
    result = one(service, update("e" * 64, "The user lives in Porto."), "preserve_history")
    assert result.action == "add" and "not found" in (result.reason or "")
    assert texts(service) == ["The user lives in Porto."]


def test_preserve_history_applies_delete(service: MemoryService) -> None:
    go = service.add(KEY, {"text": "The project requires Go 1.21."})
    assert one(service, Operation(type="delete", memory_id=go.id), "preserve_history").status == "applied"
    assert texts(service) == []


def test_entries_are_planned_against_entries_not_only_memories(service: MemoryService) -> None:
    stored: Entry = service.add(KEY, OLD)
    assert enrich_failure(stored, _new()) is None
