"""The scale benchmark's measurements on a set of in-process shards (``ShardCore``, no Ray).

:class:`Shards` opens ``settings.shards`` ShardCores as a shard actor does (their own stores, keyword-index
recovery, archive) and routes users with :func:`memcore.ids.shard_of`, as ``LocalShardBackend`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.report import ROOT, load_average
from bench.harness.timing import percentiles, time_calls

STORES = ("vectors", "keywords", "archive")


class Shards:
    def __init__(self, settings: Any, embedder: Any) -> None:
        self.settings, self.embedder = settings, embedder
        self.cores: list[Any] = []

    def open(self) -> dict[str, Any]:
        """Open every shard (start_workers=False: no extraction or maintenance threads); seconds per shard."""
        from actors.shard import ShardCore

        secs, rebuilt = [], []
        for k in range(self.settings.shards):
            t0 = time.perf_counter()
            core = ShardCore(self.settings, k, self.embedder, start_workers=False)
            secs.append(round(time.perf_counter() - t0, 3))
            rebuilt.append(core.rebuilt)
            self.cores.append(core)
        return {"seconds_per_shard": secs, "seconds_total": round(sum(secs), 3), "rebuilt_docs": rebuilt}

    def close(self) -> None:
        for core in self.cores:
            core.close()
        self.cores = []

    def core(self, key: Any) -> Any:
        from memcore.ids import shard_of

        return self.cores[shard_of(key, self.settings.shards)]

    def entries(self) -> list[int]:
        return [c.service.vectors.count(None) for c in self.cores]

    def commit(self) -> None:
        for c in self.cores:
            c.service.keywords.commit()


def write_batch(shards: Shards, calls: Sequence[tuple[Any, list, list, np.ndarray]], method: str) -> dict[str, Any]:
    """Time ``backfill`` (archive + entries) or ``add_many`` (entries) of prepared calls; entries/s."""
    n = sum(len(c[2]) for c in calls)
    t0 = time.perf_counter()
    for key, sessions, mems, vecs in calls:
        core = shards.core(key)
        if method == "backfill":
            core.backfill(key, sessions, mems, vecs)
        else:
            core.add_many(key, mems, vecs)
    shards.commit()
    secs = time.perf_counter() - t0
    return {"entries": n, "calls": len(calls), "seconds": round(secs, 3), "entries_per_s": round(n / secs, 1),
            "load_average": load_average()}


def search_latency(shards: Shards, users: Sequence[Any], qtexts: Sequence[str], qvecs: np.ndarray,
                   warmup: int) -> dict[str, Any]:
    """p50/p99 of ``ShardCore.search`` (hybrid, default options) for queries aimed round-robin at ``users``:
    with the query vector given, and end to end (the shard's embedder embeds the query); modes interleaved."""
    def given(j: int) -> Any:
        key = users[j % len(users)]
        return shards.core(key).search(key, {"query": qtexts[j]}, qvecs[j])

    def e2e(j: int) -> Any:
        key = users[j % len(users)]
        return shards.core(key).search(key, {"query": qtexts[j]})

    fns = (given, e2e)
    times = time_calls(lambda p: fns[p[1]](p[0]), [(j, m) for j in range(len(qtexts)) for m in range(2)],
                       warmup=2 * warmup)
    hits = [len(given(j)) for j in range(min(20, len(qtexts)))]
    return {"vector_given": percentiles(times[0::2]), "end_to_end": percentiles(times[1::2]),
            "mean_hits": round(float(np.mean(hits)), 2), "load_average": load_average()}


def throughput(shards: Shards, users: Sequence[Any], qtexts: Sequence[str], qvecs: np.ndarray, threads: int,
               embed_batch: int) -> dict[str, Any]:
    """Queries/s: one after another, and batched (``threads`` concurrent searches; end to end the queries
    are embedded ``embed_batch`` at a time, as the ingress's batched embedder does)."""
    n = len(qtexts)

    def search(j: int, vec: Any = None) -> Any:
        key = users[j % len(users)]
        return shards.core(key).search(key, {"query": qtexts[j]}, qvecs[j] if vec is None else vec)

    def e2e_one(j: int) -> Any:
        key = users[j % len(users)]
        return shards.core(key).search(key, {"query": qtexts[j]})

    def run(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return round(n / (time.perf_counter() - t0), 1)

    def batched_e2e(pool: ThreadPoolExecutor) -> None:
        for lo in range(0, n, embed_batch):
            vecs = shards.embedder.embed_queries(list(qtexts[lo : lo + embed_batch]))
            list(pool.map(lambda p: search(p[0], p[1]), zip(range(lo, lo + len(vecs)), vecs, strict=True)))

    out = {"single_vector_given_qps": run(lambda: [search(j) for j in range(n)]),
           "single_end_to_end_qps": run(lambda: [e2e_one(j) for j in range(n)])}
    with ThreadPoolExecutor(threads) as pool:
        out["batched_vector_given_qps"] = run(lambda: list(pool.map(search, range(n))))
        out["batched_end_to_end_qps"] = run(lambda: batched_e2e(pool))
    return out | {"queries": n, "threads": threads, "embed_batch": embed_batch, "load_average": load_average()}


def disk_bytes(data_dir: Path) -> dict[str, int]:
    """Bytes on disk under the shards, by store (vectors, keywords, archive incl. WAL, other)."""
    out: Counter[str] = Counter()
    for root, _, files in os.walk(data_dir):
        rel = Path(root).relative_to(data_dir).parts
        for f in files:
            try:
                size = os.path.getsize(os.path.join(root, f))
            except FileNotFoundError:
                continue  # an engine's temp file, gone between the listing and the look (Tantivy's .tmp*)
            if len(rel) >= 3 and rel[2] in ("vectors", "keywords"):
                out[rel[2]] += size
            elif f.startswith("archive.sqlite3"):
                out["archive"] += size
            else:
                out["other"] += size
    return {k: out.get(k, 0) for k in (*STORES, "other")}


def store_rss(settings: Any, probe: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Resident memory of each store kind of all shards, each opened alone in a fresh child process (one at a
    time) and warmed by reads: MB over the child's baseline (Python + imports), and as bytes per entry."""
    spec = tmp / "rss_probe.json"
    spec.write_text(json.dumps({**probe, "data_dir": str(settings.data_dir), "shards": settings.shards,
                                "dim": probe["dim"]}))
    out: dict[str, Any] = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for store in STORES:
        proc = subprocess.run([sys.executable, "-m", "bench.scale.rss", str(spec), store], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=1800)
        if proc.returncode != 0:
            out[store] = {"error": proc.stderr[-2000:]}
            continue
        out[store] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def restart(shards: Shards) -> dict[str, Any]:
    """Close every shard and reopen it (a shard restart), then again with every keyword index deleted
    (rebuilt from the vector store at open). The shards are left open."""
    shards.close()
    opened = shards.open()
    shards.close()
    for k in range(shards.settings.shards):
        from memcore.layout import ShardLayout

        shutil.rmtree(ShardLayout(shards.settings, k).keywords_dir())
    rebuilt = shards.open()
    return {"open": opened, "rebuild_keywords": rebuilt, "load_average": load_average()}
