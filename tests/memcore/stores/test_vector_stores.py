"""The VectorStore adapters against their real engines, plus congruence between them.

``edge`` is Qdrant Edge in ``tmp_path``; ``server`` is qdrant-client's local mode
(``QdrantClient(":memory:")``); ``tiered`` is Qdrant Edge in tiers (:mod:`memcore.stores.edge_tiers`),
whose congruence scenario promotes a large user to a dedicated store (built by the real build process)
in the middle of its writes. Vectors are small (dim 8), random and L2-normalised.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from qdrant_client import QdrantClient

from memcore.errors import StoreError
from memcore.ids import memory_id, point_id
from memcore.model import Entry, Kind, Memory, Source, UserKey
from memcore.ports import VectorStore
from memcore.stores.edge_tiers import TieredEdgeStore
from memcore.stores.qdrant import QdrantServerStore
from memcore.stores.qdrant_edge import QdrantEdgeStore

DIM = 8
BACKENDS = ["edge", "server", "tiered"]
TIER_MIN = 1000
"""The tiered store's promotion size in these tests (the congruence scenario promotes alice by hand)."""
ALICE = UserKey(app="app", user="alice")
BOB = UserKey(app="app", user="bob")
ALICE_ELSEWHERE = UserKey(app="other", user="alice")
T0 = datetime(2024, 1, 1, tzinfo=UTC)

Vec = npt.NDArray[np.float32]


def unit(rows: int, seed: int = 0) -> Vec:
    v = np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)
    out: Vec = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def entry(
    text: str,
    key: UserKey = ALICE,
    *,
    kind: Kind = Kind.FACT,
    event_time: datetime | None = None,
    deleted: bool = False,
    topics: list[str] | None = None,
) -> Entry:
    mem = Memory(text=text, kind=kind, event_time=event_time, topics=topics or [])
    return Entry(
        id=memory_id(key, mem),
        app=key.app,
        user=key.user,
        created_at=T0,
        updated_at=T0,
        deleted_at=T0 if deleted else None,
        **mem.model_dump(),
    )


def make_store(backend: str, root: Path) -> VectorStore:
    if backend == "edge":
        return QdrantEdgeStore(root / "edge", DIM)
    if backend == "tiered":
        return TieredEdgeStore(root / "tiered", DIM, min_entries=TIER_MIN)
    return QdrantServerStore(QdrantClient(":memory:"), "memories", DIM, owns_client=True)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


def ids(hits: list[tuple[Entry, float]]) -> list[str]:
    return [e.id for e, _ in hits]


def test_implements_port(store: VectorStore) -> None:
    assert isinstance(store, VectorStore)
    assert store.dim == DIM


def test_roundtrip_every_field(store: VectorStore) -> None:
    full = Entry(
        id="f" * 64,
        app=ALICE.app,
        user=ALICE.user,
        text="Alice met Bob at the café in Zürich",
        topics=["travel", "friends"],
        kind=Kind.EPISODE,
        event_time=datetime(2024, 3, 5, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
        participants=["Alice", "Bob"],
        location="Zürich",
        source=Source.ASSISTANT,
        provenance=["s1:3", "s1:4"],
        created_at=datetime(2024, 3, 5, 12, 0, 0, 1, tzinfo=UTC),
        updated_at=datetime(2024, 3, 6, 12, 0, 0, tzinfo=UTC),
        deleted_at=datetime(2024, 3, 7, tzinfo=UTC),
        expires_at=datetime(2024, 3, 8, 1, 2, 3, 4, tzinfo=UTC),
    )
    bare = entry("plain fact with nothing else")
    assert bare.event_time is None and bare.location is None and bare.topics == []
    store.upsert([full, bare], unit(2))
    got = store.get(ALICE, [full.id, bare.id])
    assert got == [full, bare]
    assert got[0].event_time == full.event_time and got[0].event_time is not None
    assert got[0].event_time.tzinfo is not None
    assert got[0].expires_at == full.expires_at and got[1].expires_at is None
    assert store.get(ALICE, [bare.id, full.id, bare.id]) == [bare, full]
    assert store.get(ALICE, ["0" * 64, "not-a-hex-id"]) == []
    assert store.get(ALICE, []) == []


def test_replace_by_id(store: VectorStore) -> None:
    v = unit(2, seed=1)
    first = entry("likes tea", topics=["drinks"])
    store.upsert([first], v[:1])
    second = first.model_copy(update={"topics": ["tea"], "updated_at": T0 + timedelta(days=1)})
    store.upsert([second], v[1:])
    assert store.get(ALICE, [first.id]) == [second]
    assert store.count(ALICE) == 1
    hits = store.search(ALICE, v[1], limit=5)
    assert ids(hits) == [first.id]
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)


def test_set_payload_keeps_vector(store: VectorStore) -> None:
    v = unit(3, seed=2)
    es = [entry(f"fact {i}") for i in range(3)]
    store.upsert(es, v)
    changed = es[1].model_copy(update={"topics": ["new"], "location": "Paris"})
    store.set_payload([changed])
    assert store.get(ALICE, [es[1].id]) == [changed]
    (top, score), *_ = store.search(ALICE, v[1], limit=3)
    assert top == changed
    assert score == pytest.approx(1.0, abs=1e-5)
    # unknown ids are ignored, not created
    store.set_payload([entry("never stored")])
    assert store.count(ALICE, include_deleted=True) == 3
    store.set_payload([])


def test_tombstones_hidden_from_search_but_returned_by_get(store: VectorStore) -> None:
    v = unit(3, seed=3)
    es = [entry(f"fact {i}") for i in range(3)]
    store.upsert(es, v)
    tomb = es[0].model_copy(update={"deleted_at": T0 + timedelta(hours=1)})
    store.set_payload([tomb])
    assert es[0].id not in ids(store.search(ALICE, v[0], limit=10))
    assert store.get(ALICE, [es[0].id]) == [tomb]
    assert store.count(ALICE) == 2
    assert store.count(ALICE, include_deleted=True) == 3
    assert {e.id for e in store.scroll(ALICE, include_deleted=False)} == {es[1].id, es[2].id}
    assert {e.id for e in store.scroll(ALICE)} == {e.id for e in es}
    # reactivation
    store.set_payload([es[0]])
    assert ids(store.search(ALICE, v[0], limit=1)) == [es[0].id]
    # a tombstone written by upsert is hidden too
    store.upsert([tomb], v[:1])
    assert es[0].id not in ids(store.search(ALICE, v[0], limit=10))


def test_search_points_is_search_without_the_entries(store: VectorStore) -> None:
    """(point id, cosine) of each hit, the same hits and order as :meth:`search` (tombstones and other users
    left out); ``get_points`` gives the entries and stored vectors back, scoped to the user."""
    v = unit(12, seed=8)
    es = [entry(f"fact {i}") for i in range(10)] + [entry("fact 0", BOB), entry("gone", deleted=True)]
    store.upsert(es, v)
    q = unit(1, seed=9)[0]
    hits = store.search(ALICE, q, limit=8)
    points = store.search_points(ALICE, q, limit=8)
    assert [p for p, _ in points] == [point_id(e.id) for e, _ in hits]
    assert [s for _, s in points] == pytest.approx([s for _, s in hits], abs=1e-6)
    found, rows = store.get_points(ALICE, [p for p, _ in points] + [point_id(es[10].id), point_id("nothing")])
    assert {e.id for e in found} == {e.id for e, _ in hits}  # Bob's point and an unknown id are absent
    by_id = {e.id: i for i, e in enumerate(es)}
    for e, row in zip(found, rows, strict=True):
        assert np.allclose(row, v[by_id[e.id]], atol=1e-5)
    tomb, tomb_rows = store.get_points(ALICE, [point_id(es[11].id)])
    assert [e.id for e in tomb] == [es[11].id] and tomb_rows.shape == (1, DIM)  # tombstones included
    empty, empty_rows = store.get_points(ALICE, [])
    assert empty == [] and empty_rows.shape == (0, DIM)


def test_scope_isolation(store: VectorStore) -> None:
    v = unit(1, seed=4)
    mine = entry("shared text", ALICE)
    theirs = entry("shared text", BOB)
    elsewhere = entry("shared text", ALICE_ELSEWHERE)
    assert len({mine.id, theirs.id, elsewhere.id}) == 3
    store.upsert([mine, theirs, elsewhere], np.repeat(v, 3, axis=0))

    assert store.get(ALICE, [theirs.id, elsewhere.id]) == []
    assert store.get(BOB, [mine.id, theirs.id]) == [theirs]
    assert ids(store.search(ALICE, v[0], limit=10)) == [mine.id]
    assert ids(store.search(BOB, v[0], limit=10)) == [theirs.id]
    assert [e.id for e in store.scroll(ALICE)] == [mine.id]
    assert store.count(ALICE) == 1 and store.count(None) == 3

    store.delete(ALICE, [theirs.id, elsewhere.id])  # not Alice's: ignored
    assert store.count(None) == 3
    # set_payload is scoped by the entry's own key: a payload claiming another user does not land
    store.set_payload([theirs.model_copy(update={"id": mine.id})])
    assert store.get(ALICE, [mine.id]) == [mine]
    store.delete_user(ALICE)
    assert store.count(ALICE, include_deleted=True) == 0
    assert store.get(BOB, [theirs.id]) == [theirs]
    assert store.get(ALICE_ELSEWHERE, [elsewhere.id]) == [elsewhere]


def test_kind_filter(store: VectorStore) -> None:
    es = [entry(f"e{i}", kind=Kind.EPISODE if i % 2 else Kind.FACT) for i in range(6)]
    store.upsert(es, unit(6, seed=5))
    q = unit(1, seed=6)[0]
    episodes = store.search(ALICE, q, limit=10, kind=Kind.EPISODE)
    facts = store.search(ALICE, q, limit=10, kind=Kind.FACT)
    assert {e.kind for e, _ in episodes} == {Kind.EPISODE} and len(episodes) == 3
    assert {e.kind for e, _ in facts} == {Kind.FACT} and len(facts) == 3
    assert len(store.search(ALICE, q, limit=10)) == 6


def test_time_range_filter(store: VectorStore) -> None:
    days = [T0 + timedelta(days=d) for d in range(5)]
    es = [entry(f"day {i}", kind=Kind.EPISODE, event_time=t) for i, t in enumerate(days)]
    timeless = entry("no time")
    store.upsert([*es, timeless], unit(6, seed=7))
    q = unit(1, seed=8)[0]

    def found(**kw: datetime) -> set[str]:
        return {e.id for e, _ in store.search(ALICE, q, limit=10, **kw)}  # type: ignore[arg-type]

    assert found(time_from=days[1], time_to=days[3]) == {es[1].id, es[2].id, es[3].id}  # inclusive
    assert found(time_from=days[3]) == {es[3].id, es[4].id}
    assert found(time_to=days[0]) == {es[0].id}
    naive = days[2].replace(tzinfo=None)  # naive means UTC
    assert found(time_from=naive, time_to=naive) == {es[2].id}
    other_tz = days[2].astimezone(timezone(timedelta(hours=-5)))
    assert found(time_from=other_tz, time_to=other_tz) == {es[2].id}
    assert found() == {e.id for e in es} | {timeless.id}


def test_delete_and_delete_user(store: VectorStore) -> None:
    es = [entry(f"a{i}") for i in range(4)]
    bs = [entry(f"b{i}", BOB) for i in range(2)]
    store.upsert([*es, *bs], unit(6, seed=9))
    store.delete(ALICE, [es[0].id, es[1].id, "f" * 64])
    assert store.get(ALICE, [e.id for e in es]) == es[2:]
    store.delete(ALICE, [])
    store.delete_user(ALICE)
    assert store.count(ALICE, include_deleted=True) == 0
    assert list(store.scroll(ALICE)) == []
    assert store.count(BOB) == 2
    store.delete_user(ALICE)  # idempotent


def test_scroll_pages_and_count(store: VectorStore) -> None:
    es = [entry(f"fact {i}", ALICE if i % 3 else BOB, deleted=i % 10 == 0) for i in range(700)]
    store.upsert(es, unit(700, seed=10))
    everything = list(store.scroll())
    assert len(everything) == 700 and {e.id for e in everything} == {e.id for e in es}
    alice = [e for e in es if e.user == "alice"]
    assert sorted(e.id for e in store.scroll(ALICE)) == sorted(e.id for e in alice)
    active_alice = [e for e in alice if e.active]
    assert sorted(e.id for e in store.scroll(ALICE, include_deleted=False)) == sorted(e.id for e in active_alice)
    assert store.count(ALICE) == len(active_alice)
    assert store.count(ALICE, include_deleted=True) == len(alice)
    assert store.count(None) == sum(e.active for e in es)
    assert store.count(None, include_deleted=True) == 700
    by_id = {e.id: e for e in es}
    assert all(by_id[e.id] == e for e in everything)


def test_search_limits_and_ordering(store: VectorStore) -> None:
    q = unit(1, seed=11)[0]
    assert store.search(ALICE, q, limit=10) == []
    es = [entry(f"fact {i}") for i in range(5)]
    v = unit(5, seed=12)
    store.upsert(es, v)
    hits = store.search(ALICE, q, limit=1000)
    assert len(hits) == 5
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    expected = v @ (q / np.linalg.norm(q))
    assert dict((e.id, s) for e, s in hits) == pytest.approx(
        {e.id: float(x) for e, x in zip(es, expected, strict=True)}, abs=1e-4
    )
    assert len(store.search(ALICE, q, limit=2)) == 2
    with pytest.raises(ValueError):
        store.search(ALICE, q, limit=0)


def test_bad_vectors_rejected(store: VectorStore) -> None:
    es = [entry("a"), entry("b")]
    with pytest.raises(ValueError):
        store.upsert(es, unit(1))
    with pytest.raises(ValueError):
        store.upsert(es, np.ones((2, DIM + 1), dtype=np.float32))
    with pytest.raises(ValueError):
        store.search(ALICE, np.ones(DIM + 1, dtype=np.float32), limit=3)
    store.upsert([], np.zeros((0, DIM), dtype=np.float32))
    assert store.count(None, include_deleted=True) == 0


def test_closed_store_refuses(store: VectorStore) -> None:
    store.close()
    with pytest.raises(StoreError):
        store.count(ALICE)
    with pytest.raises(StoreError):
        list(store.scroll(ALICE))
    store.close()


# -- congruence --------------------------------------------------------------------------

Scenario = Callable[[VectorStore], list[object]]


def _scenario(store: VectorStore) -> list[object]:
    """Writes a mixed data set, mutates it, and records every observable result."""
    rng_vectors = unit(400, seed=20)
    keys = [ALICE, BOB, ALICE_ELSEWHERE]
    es = [
        entry(
            f"memory {i}",
            keys[i % 3],
            kind=Kind.EPISODE if i % 4 == 0 else Kind.FACT,
            event_time=T0 + timedelta(hours=i) if i % 5 else None,
        )
        for i in range(400)
    ]
    es = [e.model_copy(update={"expires_at": T0 + timedelta(minutes=i)}) if i % 6 == 0 else e
          for i, e in enumerate(es)]  # a per-entry expiry is payload both engines keep alike
    store.upsert(es[:200], rng_vectors[:200])
    store.upsert(es[200:], rng_vectors[200:])
    if isinstance(store, TieredEdgeStore):  # alice moves to a store of her own; the later writes follow her
        assert store.build(ALICE)["switched"] and set(store.tiers()) == {ALICE}
    store.set_payload([e.model_copy(update={"deleted_at": T0}) for e in es[::7]])
    store.upsert(es[1:10:2], rng_vectors[11:20:2])  # replace vectors (and reactivate)
    store.delete(ALICE, [e.id for e in es[3:30:3]])
    store.delete_user(ALICE_ELSEWHERE)

    out: list[object] = []
    queries = unit(6, seed=21)
    for key in keys:
        for q in queries:
            out.append(("search", [(e.id, s) for e, s in store.search(key, q, limit=15)]))
            out.append(("kind", [(e.id, s) for e, s in store.search(key, q, limit=15, kind=Kind.EPISODE)]))
            rng = {"time_from": T0 + timedelta(hours=50), "time_to": T0 + timedelta(hours=250)}
            out.append(("time", [(e.id, s) for e, s in store.search(key, q, limit=15, **rng)]))  # type: ignore[arg-type]
            out.append(("points", store.search_points(key, q, limit=15, kind=Kind.FACT)))
        out.append(("get", store.get(key, [e.id for e in es[::3]])))
        found, rows = store.get_points(key, [point_id(e.id) for e in es[::5]])
        out.append(("get_points", sorted((e.id, tuple(np.round(r, 4))) for e, r in zip(found, rows, strict=True))))
        out.append(("expiry", [(e.id, e.expires_at) for e in store.scroll(key)]))
        out.append(("scroll", [e.id for e in store.scroll(key)]))
        out.append(("scroll-active", [e.id for e in store.scroll(key, include_deleted=False)]))
        out.append(("count", store.count(key), store.count(key, include_deleted=True)))
    out.append(("all", [e.id for e in store.scroll(None)], store.count(None)))
    if isinstance(store, TieredEdgeStore):
        assert store.shared.count(ALICE, include_deleted=True) == 0, "no copy left in the shared store"
    return out


def _assert_congruent(a: object, b: object) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-4)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            _assert_congruent(x, y)
    else:
        assert a == b


def test_adapters_are_congruent(tmp_path: Path) -> None:
    results = []
    for backend in BACKENDS:
        s = make_store(backend, tmp_path)
        try:
            results.append(_scenario(s))
        finally:
            s.close()
    edge, server, tiered = results
    assert any(len(r[1]) == 15 for r in edge if isinstance(r, tuple) and r[0] == "search")  # non-trivial
    _assert_congruent(edge, server)
    _assert_congruent(edge, tiered)


# -- edge only: persistence ----------------------------------------------------------------


def test_edge_reopen_finds_everything(tmp_path: Path) -> None:
    path = tmp_path / "shard"
    v = unit(300, seed=30)
    es = [entry(f"fact {i}", deleted=i % 9 == 0) for i in range(300)]
    first = QdrantEdgeStore(path, DIM)
    first.upsert(es, v)
    first.set_payload([es[1].model_copy(update={"topics": ["edited"]})])
    first.delete(ALICE, [es[2].id])
    before = [(e.id, s) for e, s in first.search(ALICE, v[5], limit=20)]
    first.close()

    again = QdrantEdgeStore(path, DIM)
    try:
        assert again.count(ALICE, include_deleted=True) == 299
        assert again.get(ALICE, [es[1].id])[0].topics == ["edited"]
        assert again.get(ALICE, [es[2].id]) == []
        assert again.get(ALICE, [es[0].id]) == [es[0]]  # tombstone kept
        _assert_congruent([(e.id, s) for e, s in again.search(ALICE, v[5], limit=20)], before)
        again.upsert([entry("after reopen")], unit(1, seed=31))
        assert again.count(ALICE, include_deleted=True) == 300
    finally:
        again.close()


def test_edge_survives_process_death(tmp_path: Path) -> None:
    """A write acknowledged by a process that then dies without closing is there on reopen."""
    path = tmp_path / "shard"
    script = textwrap.dedent(
        f"""
        import os, sys
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_vector_stores import entry, unit, ALICE, DIM
        from memcore.stores.qdrant_edge import QdrantEdgeStore
        s = QdrantEdgeStore({str(path)!r}, DIM)
        es = [entry(f"fact {{i}}") for i in range(50)]
        s.upsert(es, unit(50, seed=40))
        s.delete(ALICE, [es[0].id])
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, cwd=Path(__file__).parents[3])
    s = QdrantEdgeStore(path, DIM)
    try:
        assert s.count(ALICE) == 49
        hits = s.search(ALICE, unit(50, seed=40)[7], limit=1)
        assert hits[0][0].text == "fact 7" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    finally:
        s.close()


def test_edge_one_process_per_directory_and_dim_checked(tmp_path: Path) -> None:
    path = tmp_path / "shard"
    s = QdrantEdgeStore(path, DIM)
    with pytest.raises(StoreError, match="WAL"):
        QdrantEdgeStore(path, DIM)
    s.close()
    with pytest.raises(StoreError, match="vector size"):
        QdrantEdgeStore(path, DIM + 1)
    QdrantEdgeStore(path, DIM).close()  # a failed open left the directory usable


def test_edge_optimize_keeps_results(tmp_path: Path) -> None:
    s = QdrantEdgeStore(tmp_path / "shard", DIM)
    try:
        es = [entry(f"fact {i}", ALICE if i % 2 else BOB) for i in range(500)]
        v = unit(500, seed=50)
        s.upsert(es, v)
        before = [(e.id, sc) for e, sc in s.search(ALICE, v[1], limit=10)]
        s.optimize()
        _assert_congruent([(e.id, sc) for e, sc in s.search(ALICE, v[1], limit=10)], before)
        assert s.count(None) == 500
    finally:
        s.close()


# -- server only ---------------------------------------------------------------------------


def test_server_reuses_collection_and_checks_dim() -> None:
    client = QdrantClient(":memory:")
    a = QdrantServerStore(client, "memories", DIM)
    a.upsert([entry("x")], unit(1))
    b = QdrantServerStore(client, "memories", DIM)
    assert b.count(ALICE) == 1
    with pytest.raises(StoreError, match="size"):
        QdrantServerStore(client, "memories", DIM + 1)
    a.close()  # does not own the client
    assert b.count(ALICE) == 1
    client.close()
