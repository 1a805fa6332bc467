"""Qdrant Edge in tiers (memcore.stores.edge_tiers): large users promoted to a store of their own, built by the
real build process; what is written during a build, failed builds, crashes around the switch, erasure and
compaction. Every check compares with a plain Qdrant Edge store that received the same writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memcore.errors import StoreError
from memcore.model import Entry, UserKey
from memcore.stores import edge_tiers, hnsw_build
from memcore.stores.edge_tiers import MANIFEST, TieredEdgeStore, compact_dir
from memcore.stores.qdrant_edge import QdrantEdgeStore
from tests.memcore.stores.test_vector_stores import ALICE, BOB, DIM, T0, entry, unit

CAROL = UserKey(app="app", user="carol")
MIN = 40


def load(*stores: Any, sizes: dict[UserKey, int] | None = None, seed: int = 1) -> dict[UserKey, list[Entry]]:
    """The same entries and vectors into every store: alice 60, bob 45, carol 10 (unless ``sizes``)."""
    made: dict[UserKey, list[Entry]] = {}
    for n, (key, size) in enumerate((sizes or {ALICE: 60, BOB: 45, CAROL: 10}).items()):
        es = [entry(f"{key.user} note {i} seed {seed}", key) for i in range(size)]
        vs = unit(size, seed=seed * 10 + n)
        for s in stores:
            s.upsert(es, vs)
        made[key] = es
    return made


def observed(store: Any, keys: tuple[UserKey, ...] = (ALICE, BOB, CAROL)) -> list[object]:
    out: list[object] = []
    for key in keys:
        for q in unit(3, seed=99):
            out.append([(e.id, round(s, 4)) for e, s in store.search(key, q, limit=10)])
        out.append(sorted(e.model_dump_json() for e in store.scroll(key)))
        out.append((store.count(key), store.count(key, include_deleted=True)))
    out.append([e.id for e in store.scroll(None)])
    out.append(store.count(None, include_deleted=True))
    return out


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    tiered = TieredEdgeStore(tmp_path / "vectors", DIM, min_entries=MIN, rebuild_growth=0.5)
    plain = QdrantEdgeStore(tmp_path / "plain", DIM)
    yield tiered, plain
    tiered.close()
    plain.close()


def test_maintain_promotes_large_users_then_rebuilds_them_when_grown(pair: Any) -> None:
    tiered, plain = pair
    load(tiered, plain)
    done = tiered.maintain()
    assert [(d["user"], d["switched"], d["rebuilt"]) for d in done] == [("alice", True, False), ("bob", True, False)]
    assert set(tiered.tiers()) == {ALICE, BOB} and tiered.shared.count(ALICE, include_deleted=True) == 0
    assert observed(tiered) == observed(plain)
    assert tiered.maintain() == [], "nothing grew: nothing to build"
    load(tiered, plain, sizes={ALICE: 35}, seed=2)  # alice grows by over half: rebuilt from her own store
    (rebuilt,) = tiered.maintain()
    assert (rebuilt["user"], rebuilt["rebuilt"], rebuilt["points"]) == ("alice", True, 95)
    dirs = sorted(p.name for p in tiered.tiers_path.iterdir() if p.is_dir())
    assert len(dirs) == 2, "the old store of alice is gone"
    assert observed(tiered) == observed(plain)


def test_writes_during_a_build_are_caught_up(pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered, plain = pair
    made = load(tiered, plain)
    real = hnsw_build.run_build

    def build_while_writing(staging: Path, target: Path, dim: int) -> None:
        real(staging, target, dim)  # the export is done: these writes reach the shared store only
        fresh = [entry(f"alice late {i}", ALICE) for i in range(5)]
        gone = [e.model_copy(update={"deleted_at": T0}) for e in made[ALICE][:3]]
        for s in (tiered, plain):
            s.upsert(fresh, unit(5, seed=7))
            s.set_payload(gone)
            s.delete(ALICE, [made[ALICE][10].id, made[ALICE][11].id])
            s.upsert(made[BOB][:2], unit(2, seed=8))  # another user's write is not caught up, just kept

    monkeypatch.setattr(hnsw_build, "run_build", build_while_writing)
    result = tiered.build(ALICE)
    assert result["switched"] and result["caught_up"] == 8  # 5 new + 3 tombstoned (2 deleted: gone)
    assert observed(tiered) == observed(plain)


def test_a_failed_build_changes_nothing(pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered, plain = pair
    load(tiered, plain)

    def broken(staging: Path, target: Path, dim: int) -> None:
        target.mkdir(parents=True)
        raise StoreError("the build process died", field="path")

    monkeypatch.setattr(hnsw_build, "run_build", broken)
    with pytest.raises(StoreError, match="died"):
        tiered.build(ALICE)
    assert tiered.tiers() == {} and not any(tiered.tiers_path.iterdir())
    assert observed(tiered) == observed(plain)


def test_an_erasure_during_a_build_wins(pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered, plain = pair
    load(tiered, plain)
    real = hnsw_build.run_build

    def build_then_forget(staging: Path, target: Path, dim: int) -> None:
        real(staging, target, dim)
        tiered.delete_user(ALICE)
        plain.delete_user(ALICE)

    monkeypatch.setattr(hnsw_build, "run_build", build_then_forget)
    assert tiered.build(ALICE)["switched"] is False
    assert tiered.tiers() == {} and tiered.count(ALICE, include_deleted=True) == 0
    assert not any(p.is_dir() for p in tiered.tiers_path.iterdir())
    assert observed(tiered) == observed(plain)


def test_a_crash_between_the_manifest_and_the_shared_delete_is_repaired_on_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered = TieredEdgeStore(tmp_path / "vectors", DIM, min_entries=MIN)
    plain = QdrantEdgeStore(tmp_path / "plain", DIM)
    try:
        load(tiered, plain)

        def die(key: UserKey) -> None:
            raise RuntimeError("killed")

        monkeypatch.setattr(tiered.shared, "delete_user", die)
        with pytest.raises(RuntimeError):
            tiered.build(ALICE)
        monkeypatch.undo()
        named = json.loads((tiered.tiers_path / MANIFEST).read_text())["users"]
        assert [u["user"] for u in named] == ["alice"]
        assert tiered.shared.count(ALICE, include_deleted=True) == 60, "both copies exist, as after a crash"
        tiered.close()
        tiered = TieredEdgeStore(tmp_path / "vectors", DIM, min_entries=MIN)
        assert set(tiered.tiers()) == {ALICE} and tiered.shared.count(ALICE, include_deleted=True) == 0
        assert observed(tiered) == observed(plain)
    finally:
        tiered.close()
        plain.close()


def test_open_deletes_what_no_manifest_names(tmp_path: Path) -> None:
    tiered = TieredEdgeStore(tmp_path / "vectors", DIM, min_entries=MIN)
    load(tiered)
    tiered.build(ALICE)
    tiered.close()
    stray = [tiered.tiers_path / "staging-abc", tiered.tiers_path / "abc-123"]
    for p in stray:
        (p / "segments").mkdir(parents=True)
    again = TieredEdgeStore(tmp_path / "vectors", DIM, min_entries=MIN)
    try:
        assert not any(p.exists() for p in stray) and set(again.tiers()) == {ALICE}
        assert again.count(ALICE) == 60
    finally:
        again.close()


def test_forgetting_a_promoted_user_deletes_their_directory(pair: Any) -> None:
    tiered, plain = pair
    load(tiered, plain)
    tiered.maintain()
    (alice_dir,) = [p for p in tiered.tiers_path.iterdir()
                    if p.is_dir() and p.name.startswith(edge_tiers._digest(ALICE))]
    tiered.delete_user(ALICE)
    plain.delete_user(ALICE)
    assert not alice_dir.exists() and set(tiered.tiers()) == {BOB}
    assert observed(tiered) == observed(plain)


def test_compaction_folds_every_tier_into_one_fresh_store(tmp_path: Path) -> None:
    path = tmp_path / "vectors"
    tiered = TieredEdgeStore(path, DIM, min_entries=MIN)
    plain = QdrantEdgeStore(tmp_path / "plain", DIM)
    try:
        made = load(tiered, plain)
        tiered.maintain()
        for s in (tiered, plain):
            s.delete(ALICE, [e.id for e in made[ALICE][:20]])
        before = observed(tiered)
        assert before == observed(plain)
        tiered.close()
        assert compact_dir(path, DIM) == 115 - 20
        assert not edge_tiers.tiers_dir(path).exists()
        tiered = TieredEdgeStore(path, DIM, min_entries=MIN)
        assert tiered.tiers() == {} and observed(tiered) == before
        assert np.isclose(tiered.search(ALICE, unit(1, seed=3)[0], limit=1)[0][1],
                          plain.search(ALICE, unit(1, seed=3)[0], limit=1)[0][1])
    finally:
        tiered.close()
        plain.close()
