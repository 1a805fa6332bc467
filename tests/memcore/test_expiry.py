"""Per-entry expiry (``ttl_s`` / ``expires_at``) over both vector-store engines: every read path hides an
expired entry before any sweep, an add sets the expiry anew, an update keeps it unless it names one (``ttl_s``
restarts the lifetime, ``expires_at`` sets it, ``expires_at: null`` removes it, the id is kept), bad values
are refused naming the field and nothing is written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memcore.errors import NotFoundError, ValidationError
from memcore.fields import MAX_TTL_S
from memcore.model import UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")


def _clock(service: MemoryService) -> object:
    return service._clock  # the test's StepClock (one second per call)


def test_expired_entry_is_hidden_from_every_read(service: MemoryService) -> None:
    short = service.add(A, {"text": "Alice parks on level three today", "ttl_s": 30})
    keep = service.add(A, {"text": "Alice parks her bike at the station"})
    assert short.expires_at is not None and keep.expires_at is None
    assert short.expires_at - short.updated_at == timedelta(seconds=30)
    # before the expiry: seen everywhere
    assert service.get(A, short.id).id == short.id
    assert {e.id for e in service.read(A)} == {short.id, keep.id}
    found = service.search(A, SearchOptions(query="where does Alice park", similarity_threshold=-1))
    assert short.id in {h.entry.id for h in found}
    clock = _clock(service)
    clock.t += timedelta(seconds=60)  # type: ignore[attr-defined]
    # past it: no read returns it, although it is still stored (no sweep ran)
    assert [e.id for e in service.vectors.get(A, [short.id])] == [short.id]
    with pytest.raises(NotFoundError):
        service.get(A, short.id)
    assert [e.id for e in service.read(A)] == [keep.id]
    for hybrid in (True, False):
        hits = service.search(A, SearchOptions(query="Alice parks level three", hybrid=hybrid,
                                               similarity_threshold=-1))
        assert [h.entry.id for h in hits] == [keep.id]
    with pytest.raises(NotFoundError):
        service.update(A, short.id, {"topics": ["car"]})
    service.delete(A, short.id, hard=True)  # a delete (the sweep's) still finds it
    assert service.vectors.get(A, [short.id]) == []


def test_readd_sets_the_expiry_anew_and_update_keeps_it(service: MemoryService) -> None:
    e = service.add(A, {"text": "Alice is in Porto this week", "ttl_s": 10})
    again = service.add(A, {"text": "Alice is in Porto this week", "ttl_s": 100})
    assert again.id == e.id and again.expires_at == again.updated_at + timedelta(seconds=100)
    patched = service.update(A, e.id, {"topics": ["travel"]})
    assert patched.expires_at == again.expires_at
    rotated = service.update(A, e.id, {"text": "Alice is in Porto until Friday"})
    assert rotated.id != e.id and rotated.expires_at == again.expires_at
    forever = service.add(A, {"text": "Alice is in Porto until Friday"})
    assert forever.id == rotated.id and forever.expires_at is None


def test_expired_but_unswept_entry_comes_back_fresh(service: MemoryService) -> None:
    e = service.add(A, {"text": "Alice's door code is 4711", "ttl_s": 5, "topics": ["home"]})
    _clock(service).t += timedelta(seconds=10)  # type: ignore[attr-defined]
    back = service.add(A, {"text": "Alice's door code is 4711"})
    assert back.id == e.id and back.expires_at is None and back.created_at > e.created_at
    assert service.get(A, e.id).topics == []


def test_keyed_write_replaces_the_expiry(service: MemoryService) -> None:
    first = service.add(A, {"text": "coffee: flat white", "key": "drink", "ttl_s": 60})
    second = service.add(A, {"text": "coffee: espresso", "key": "drink"})
    assert second.id == first.id and second.expires_at is None and second.text == "coffee: espresso"


@pytest.mark.parametrize("bad", [0, -1, "soon", MAX_TTL_S * 2, float("nan"), float("inf")])
def test_bad_ttl_is_refused_naming_the_field(service: MemoryService, bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        service.add(A, {"text": "never written", "ttl_s": bad})
    assert err.value.field == "ttl_s"
    assert service.read(A) == []


def test_add_with_an_absolute_expiry(service: MemoryService) -> None:
    now = _clock(service).t  # type: ignore[attr-defined]
    at = now + timedelta(hours=2)
    e = service.add(A, {"text": "Alice's parcel arrives today", "expires_at": at.isoformat()})
    assert e.expires_at == at
    _clock(service).t = at - timedelta(seconds=2)  # type: ignore[attr-defined]
    assert service.get(A, e.id).id == e.id
    _clock(service).t = at  # type: ignore[attr-defined]
    with pytest.raises(NotFoundError):
        service.get(A, e.id)


@pytest.mark.parametrize(("body", "field"), [
    ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": "soon"}, "expires_at"),
    ({"ttl_s": 60, "expires_at": "2100-01-01T00:00:00Z"}, "expires_at"),
])
def test_bad_absolute_expiry_on_add_is_refused(service: MemoryService, body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        service.add(A, {"text": "never written", **body})
    assert err.value.field == field
    assert service.read(A) == []


def test_update_with_ttl_restarts_the_lifetime_and_keeps_the_id(service: MemoryService) -> None:
    e = service.add(A, {"text": "Alice is at the dentist", "ttl_s": 10, "topics": ["health"]})
    _clock(service).t += timedelta(seconds=5)  # type: ignore[attr-defined]
    renewed = service.update(A, e.id, {"ttl_s": 3600})
    assert renewed.id == e.id and renewed.text == e.text and renewed.topics == ["health"]
    assert renewed.expires_at == renewed.updated_at + timedelta(seconds=3600)
    _clock(service).t += timedelta(seconds=60)  # type: ignore[attr-defined]
    assert service.get(A, e.id).expires_at == renewed.expires_at  # alive past the old expiry
    both = service.update(A, e.id, {"topics": ["health", "today"], "ttl_s": 30})
    assert both.id == e.id and both.topics == ["health", "today"]
    assert both.expires_at == both.updated_at + timedelta(seconds=30)
    rotated = service.update(A, e.id, {"text": "Alice is at the dentist until noon", "ttl_s": 90})
    assert rotated.id != e.id and rotated.expires_at == rotated.updated_at + timedelta(seconds=90)
    assert [x.id for x in service.read(A)] == [rotated.id]


def test_update_sets_or_removes_the_expiry(service: MemoryService) -> None:
    e = service.add(A, {"text": "Alice's hotel room is 512", "ttl_s": 10})
    at = _clock(service).t + timedelta(days=3)  # type: ignore[attr-defined]
    moved = service.update(A, e.id, {"expires_at": at.isoformat()})
    assert moved.id == e.id and moved.expires_at == at
    forever = service.update(A, e.id, {"expires_at": None})
    assert forever.id == e.id and forever.expires_at is None
    _clock(service).t += timedelta(days=30)  # type: ignore[attr-defined]
    assert service.get(A, e.id).expires_at is None
    kept = service.update(A, e.id, {"topics": ["travel"]})  # names no expiry: keeps none
    assert kept.expires_at is None


@pytest.mark.parametrize(("patch", "field"), [
    ({"ttl_s": None}, "ttl_s"), ({"ttl_s": 0}, "ttl_s"), ({"ttl_s": -5}, "ttl_s"), ({"ttl_s": "later"}, "ttl_s"),
    ({"ttl_s": MAX_TTL_S * 2}, "ttl_s"), ({"topics": ["x"], "ttl_s": float("nan")}, "ttl_s"),
    ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"), ({"expires_at": "tomorrow"}, "expires_at"),
    ({"ttl_s": 60, "expires_at": "2100-01-01T00:00:00Z"}, "expires_at"),
])
def test_bad_expiry_in_an_update_is_refused_and_nothing_changes(service: MemoryService, patch: dict[str, object],
                                                                field: str) -> None:
    e = service.add(A, {"text": "Alice's locker is 17", "ttl_s": 600})
    with pytest.raises(ValidationError) as err:
        service.update(A, e.id, patch)
    assert err.value.field == field
    after = service.get(A, e.id)
    assert after.expires_at == e.expires_at and after.topics == e.topics and after.updated_at == e.updated_at


def test_an_expired_entry_is_gone_from_export_and_users_before_the_sweep(service: MemoryService) -> None:
    """Export (backups, Mem0 history) is a read like the others: an expired entry, a tombstone too, is not
    in it although it is still stored."""
    brief = service.add(A, {"text": "Alice's locker code is 4711", "ttl_s": 30})
    tomb = service.add(A, {"text": "Alice's gate code is 1234", "ttl_s": 30})
    service.delete(A, tomb.id, hard=False)
    keep = service.add(A, {"text": "Alice's bike is blue"})
    other = UserKey(app="app", user="bob")
    bobs = service.add(other, {"text": "Bob's code is 9999", "ttl_s": 30})
    assert {e.id for e in service.export("app", user="alice")} == {brief.id, tomb.id, keep.id}
    assert service.users("app") == ["alice", "bob"]
    _clock(service).t += timedelta(seconds=60)  # type: ignore[attr-defined]
    assert [e.id for e in service.export("app", user="alice")] == [keep.id]
    assert [e.id for e in service.export("app")] == [keep.id]
    assert service.users("app") == ["alice"]
    assert len(service.vectors.get(A, [brief.id, tomb.id])) == 2 and service.vectors.get(other, [bobs.id])
    assert service.purge(A, [brief.id, tomb.id, "unknown"]) == 2  # the sweep's removal, tombstones included
    assert service.vectors.get(A, [brief.id, tomb.id]) == []
