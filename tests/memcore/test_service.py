from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from memcore.errors import ConflictError, NotFoundError, StoreError, ValidationError
from memcore.ids import memory_id
from memcore.model import Kind, Memory, UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")


def test_add_is_idempotent_and_replaces_topics(service: MemoryService) -> None:
    first = service.add(A, {"text": "Likes green tea", "topics": ["drinks"]})
    again = service.add(A, {"text": "likes   green tea", "topics": ["tea"]})
    assert again.id == first.id == memory_id(A, Memory(text="Likes green tea"))
    assert again.topics == ["tea"]
    assert again.created_at == first.created_at and again.updated_at > first.updated_at
    assert [e.id for e in service.read(A)] == [first.id]
    assert service.get(A, first.id).topics == ["tea"]


def test_readd_after_soft_delete_reactivates(service: MemoryService) -> None:
    e = service.add(A, {"text": "Plays chess on Sundays"})
    service.delete(A, e.id)
    with pytest.raises(NotFoundError):
        service.get(A, e.id)
    assert service.search(A, {"query": "chess"}) == []
    back = service.add(A, {"text": "Plays chess on Sundays"})
    assert back.id == e.id and back.deleted_at is None and back.created_at == e.created_at
    assert service.get(A, e.id).active
    assert [h.entry.id for h in service.search(A, {"query": "chess Sundays"})] == [e.id]


def test_topics_only_update_keeps_id(service: MemoryService) -> None:
    e = service.add(A, {"text": "Works at ACME", "topics": ["job"]})
    u = service.update(A, e.id, {"text": "Works at ACME", "topics": ["job", "company"]})
    assert u.id == e.id and u.topics == ["job", "company"]
    assert u.created_at == e.created_at and u.updated_at > e.updated_at
    assert service.count(A) == 1


def test_update_rotates_id_and_tombstones_source(service: MemoryService) -> None:
    e = service.add(A, {"text": "Production runs Go 1.21", "topics": ["go"]})
    u = service.update(A, e.id, {"text": "Production runs Go 1.23", "topics": ["go"]})
    assert u.id != e.id and u.id == memory_id(A, Memory(text="Production runs Go 1.23"))
    assert u.created_at == e.created_at  # a new target inherits the source's created_at
    tomb = service.vectors.get(A, [e.id])
    assert len(tomb) == 1 and tomb[0].deleted_at is not None
    with pytest.raises(NotFoundError):
        service.get(A, e.id)
    assert [x.id for x in service.read(A)] == [u.id]
    hits = service.search(A, {"query": "Go 1.23 production"})
    assert [h.entry.id for h in hits] == [u.id]


def test_update_onto_tombstone_reactivates_and_keeps_target_created_at(service: MemoryService) -> None:
    old = service.add(A, {"text": "Lives in Paris"})
    service.delete(A, old.id)
    src = service.add(A, {"text": "Lives in Berlin"})
    u = service.update(A, src.id, {"text": "Lives in Paris"})
    assert u.id == old.id and u.active and u.created_at == old.created_at
    with pytest.raises(NotFoundError):
        service.get(A, src.id)


def test_hard_delete_mode_replaces_stale_tombstone(make_service: Callable[..., MemoryService]) -> None:
    svc = make_service("edge", soft_delete=False)
    stale = svc.add(A, {"text": "Lives in Paris"})
    svc.delete(A, stale.id, hard=False)  # a tombstone left from an earlier soft-delete era
    src = svc.add(A, {"text": "Lives in Berlin"})
    u = svc.update(A, src.id, {"text": "Lives in Paris"})
    assert u.id == stale.id and u.created_at == src.created_at  # replacement inherits the source
    assert svc.vectors.get(A, [src.id]) == []  # hard mode removes the source


def test_update_onto_active_id_is_conflict_and_changes_nothing(service: MemoryService) -> None:
    a = service.add(A, {"text": "Owns a cat", "topics": ["pets"]})
    b = service.add(A, {"text": "Owns a dog", "topics": ["pets"]})
    with pytest.raises(ConflictError) as info:
        service.update(A, b.id, {"text": "Owns a cat", "topics": ["changed"]})
    assert info.value.field == "memory_id"
    assert service.get(A, a.id) == a
    assert service.get(A, b.id) == b


def test_update_missing_or_deleted_is_not_found(service: MemoryService) -> None:
    with pytest.raises(NotFoundError):
        service.update(A, "nope", {"text": "x"})
    e = service.add(A, {"text": "temporary"})
    service.delete(A, e.id)
    with pytest.raises(NotFoundError):
        service.update(A, e.id, {"text": "temporary 2"})
    with pytest.raises(NotFoundError):
        service.delete(A, e.id)


def test_hard_delete_and_clear(service: MemoryService) -> None:
    e = service.add(A, {"text": "one"})
    service.delete(A, e.id, hard=True)
    assert service.vectors.get(A, [e.id]) == []
    for t in ("alpha", "beta", "gamma"):
        service.add(A, {"text": t})
    service.add(B, {"text": "bob's"})
    assert service.clear(A) == 3
    assert service.read(A) == [] and service.count(A) == 0
    assert [e.text for e in service.read(B)] == ["bob's"]
    assert service.clear(A, hard=True) == 0
    assert list(service.vectors.scroll(A)) == []


def test_read_newest_first_with_limit(service: MemoryService) -> None:
    ids = [service.add(A, {"text": f"memory number {i}"}).id for i in range(5)]
    service.update(A, ids[0], {"text": "memory number 0", "topics": ["touched"]})
    got = [e.id for e in service.read(A, 3)]
    assert got == [ids[0], ids[4], ids[3]]
    assert len(service.read(A)) == 5 and len(service.read(A, 0)) == 5


def test_users_are_isolated(service: MemoryService) -> None:
    a = service.add(A, {"text": "secret plan of alice"})
    service.add(B, {"text": "secret plan of bob"})
    assert {h.entry.user for h in service.search(A, {"query": "secret plan"})} == {"alice"}
    assert {h.entry.user for h in service.search(B, {"query": "secret plan", "hybrid": False,
                                                      "similarity_threshold": -1})} == {"bob"}
    with pytest.raises(NotFoundError):
        service.get(B, a.id)
    with pytest.raises(NotFoundError):
        service.delete(B, a.id)
    with pytest.raises(NotFoundError):
        service.update(B, a.id, {"text": "hijack"})
    assert service.get(A, a.id).text == "secret plan of alice"
    other_app = UserKey(app="other", user="alice")
    assert service.search(other_app, {"query": "secret plan"}) == []


def _episodes(service: MemoryService) -> dict[str, str]:
    data = [
        ("hike", "Went hiking on Mt. Fuji with Bob", datetime(2024, 5, 3, tzinfo=UTC)),
        ("paris", "Visited Paris for a conference", datetime(2023, 9, 10, tzinfo=UTC)),
        ("tokyo", "Flew to Tokyo for hiking season", datetime(2024, 4, 1, tzinfo=UTC)),
    ]
    out = {}
    for name, text, t in data:
        out[name] = service.add(A, {"text": text, "kind": "episode", "event_time": t}).id
    out["fact"] = service.add(A, {"text": "Loves hiking and mountains"}).id
    return out


def test_search_kind_filter_and_fallback(service: MemoryService) -> None:
    ids = _episodes(service)
    only = service.search(A, {"query": "hiking", "kind": "fact", "kind_fallback": False})
    assert [h.entry.id for h in only] == [ids["fact"]]
    merged = service.search(A, {"query": "hiking", "kind": "fact"})  # < 3 facts -> unfiltered merged
    assert merged[0].entry.id == ids["fact"]
    assert {h.entry.id for h in merged[1:]} >= {ids["hike"], ids["tokyo"]}
    assert all(h.entry.kind == Kind.EPISODE for h in merged[1:])


def test_search_time_range_and_event_order(service: MemoryService) -> None:
    ids = _episodes(service)
    hits = service.search(A, {"query": "hiking Paris Tokyo Fuji", "time_from": "2024-01-01T00:00:00Z",
                              "time_to": "2024-12-31T00:00:00Z", "kind": "episode", "kind_fallback": False})
    assert {h.entry.id for h in hits} == {ids["hike"], ids["tokyo"]}
    ordered = service.search(A, {"query": "hiking Paris Tokyo Fuji conference", "order_by_event_time": True})
    got = [h.entry.id for h in ordered]
    assert got.index(ids["paris"]) < got.index(ids["tokyo"]) < got.index(ids["hike"])
    assert got[-1] == ids["fact"]  # no event time goes last


def test_search_max_results_and_threshold(service: MemoryService) -> None:
    for i in range(15):
        service.add(A, {"text": f"note about project apollo item {i}"})
    assert len(service.search(A, {"query": "project apollo"})) == 10
    assert len(service.search(A, {"query": "project apollo", "max_results": 3})) == 3
    service.add(A, {"text": "zebra"})
    strict = service.search(A, {"query": "zebra", "hybrid": False, "similarity_threshold": 0.99})
    assert [h.entry.text for h in strict] == ["zebra"]
    assert all(h.score >= 0.99 for h in strict)
    assert service.search(A, {"query": "   "}) == []


def test_search_dedup_keeps_higher_score(service: MemoryService) -> None:
    service.add(A, {"text": "the user drinks green tea every morning at home"})
    service.add(A, {"text": "the user drinks green tea every morning at home today"})
    service.add(A, {"text": "the user likes coffee"})
    raw = service.search(A, {"query": "green tea morning", "deduplicate": False})
    deduped = service.search(A, {"query": "green tea morning", "deduplicate": True})
    assert len(deduped) == len(raw) - 1
    assert deduped[0].entry.id == raw[0].entry.id


def test_hybrid_finds_exact_keyword_the_vector_misses(service: MemoryService) -> None:
    target = service.add(A, {"text": "Config flag XK-4471 must stay disabled"}).id
    for i in range(30):
        service.add(A, {"text": f"general remark number {i} about configuration flags"})
    hybrid = [h.entry.id for h in service.search(A, {"query": "XK-4471", "max_results": 3})]
    assert target in hybrid


def test_chinese_query_finds_chinese_entry(service: MemoryService) -> None:
    zh = service.add(A, {"text": "我喜欢在周末去爬山和徒步"}).id
    service.add(A, {"text": "我每天早上喝咖啡"})
    service.add(A, {"text": "I like hiking on weekends"})
    hits = service.search(A, {"query": "爬山", "max_results": 1})
    assert [h.entry.id for h in hits] == [zh]


def test_bad_input_writes_nothing(service: MemoryService) -> None:
    with pytest.raises(ValidationError) as info:
        service.add_many(A, [{"text": "fine"}, {"text": ""}])
    assert info.value.field == "memories.1.text"
    assert service.count(A) == 0
    with pytest.raises(ValidationError) as info2:
        service.search(A, {"query": "x", "max_results": 5000})
    assert info2.value.field == "max_results"
    e = service.add(A, {"text": "keep me"})
    with pytest.raises(ValidationError):
        service.update(A, e.id, {"text": "x", "event_time": "yesterday-ish"})
    assert service.get(A, e.id) == e


def test_store_failure_is_store_error(make_service: Callable[..., MemoryService]) -> None:
    svc = make_service("edge", name="broken")
    svc.add(A, {"text": "before"})
    svc.keywords.close()
    with pytest.raises(StoreError) as info:
        svc.search(A, SearchOptions(query="before"))
    assert info.value.status_code == 503


def test_real_minilm_semantic_search(make_service: Callable[..., MemoryService], minilm) -> None:  # type: ignore[no-untyped-def]
    svc = make_service("edge", embedder=minilm, name="minilm")
    hike = svc.add(A, {"text": "I love trekking in the Alps every summer"}).id
    svc.add(A, {"text": "My favourite food is ramen"})
    svc.add(A, {"text": "I work as a tax accountant"})
    hits = svc.search(A, {"query": "mountain hiking holidays", "hybrid": False})
    assert hits[0].entry.id == hike and hits[0].score > 0.3
