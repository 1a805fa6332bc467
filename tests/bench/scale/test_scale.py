"""The scale benchmark's population and its shard probes (bench/scale/population.py, bench/scale/probes.py), small,
on real ShardCores (Qdrant Edge, Tantivy, SQLite on a temp dir) with the hashing embedder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.scale.population import Population, backfill_calls, fresh_calls, population, user_key
from bench.scale.probes import Shards, disk_bytes, restart, search_latency, write_batch
from memcore.settings import Settings


@pytest.fixture
def pop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashing_embedder: Any) -> Population:
    monkeypatch.setattr("bench.harness.datasets.CACHE", tmp_path / "cache")  # the turn vectors' cache, not the repo's
    return population(3_000, hashing_embedder.embed_passages, "hashing-test", min_size=4, cap=400)


def test_population_is_complete_users_with_skewed_sizes(pop: Population) -> None:
    sizes = pop.sizes(3_000)
    assert sizes.sum() == 3_000 and sizes.min() >= 1
    assert np.median(sizes) < sizes.max() / 5  # most users small, a few large
    assert np.all(np.diff(pop.user_of) >= 0)  # users are contiguous runs: a prefix is a store
    assert len(set(pop.texts)) == len(pop.texts)
    part, whole = pop.vectors(10, 20), pop.vectors(0, 30)
    np.testing.assert_allclose(part, whole[10:20], rtol=1e-6)  # the same whatever the batch bounds
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, rtol=1e-5)


def test_backfill_fills_every_store_and_restart_rebuilds_the_keywords(
    tmp_path: Path, pop: Population, hashing_embedder: Any
) -> None:
    settings = Settings(data_dir=tmp_path / "data", shards=2)
    shards = Shards(settings, hashing_embedder)
    shards.open()
    try:
        calls = list(backfill_calls(pop, 0, 500, 64))
        assert all(len(mems) <= 64 and len(vecs) == len(mems) for _, _, mems, vecs in calls)
        w = write_batch(shards, calls, "backfill")
        assert w["entries"] == 500 and sum(shards.entries()) == 500
        archived = sum(c.archive.events.count() for c in shards.cores)
        assert archived == 500  # one archived turn per entry
        sizes = disk_bytes(settings.data_dir)
        assert sizes["vectors"] > 0 and sizes["keywords"] > 0 and sizes["archive"] > 0
        fresh = list(fresh_calls(pop, 500, 540, 500, 16, 7))  # new memories of users already stored
        stored_users = {user_key(int(u)) for u in pop.user_of[:500]}
        assert [len(m) for _, _, m, _ in fresh] == [16, 16, 8] and {k for k, *_ in fresh} <= stored_users
        write_batch(shards, fresh, "backfill")
        assert sum(shards.entries()) == 540
        assert sum(c.archive.events.count() for c in shards.cores) == 540
        r = restart(shards)
        assert r["open"]["rebuilt_docs"] == [None, None]
        assert sum(r["rebuild_keywords"]["rebuilt_docs"]) == 540
        q = [pop.texts[3], pop.texts[7]]
        lat = search_latency(shards, [user_key(int(pop.user_of[3]))], q, pop.vectors(3, 4).repeat(2, 0), 1)
        assert lat["vector_given"]["n"] == 2 and lat["mean_hits"] > 0
    finally:
        shards.close()
