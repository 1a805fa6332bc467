"""Per-entry expiry (``ttl_s`` -> ``expires_at``) over both vector-store engines: every read path hides an
expired entry before any sweep, an add sets the expiry anew, an update keeps it, bad values are refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memcore.errors import NotFoundError, ValidationError
from memcore.model import MAX_TTL_S, UserKey
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
