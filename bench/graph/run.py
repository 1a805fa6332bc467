"""Knowledge-graph latency on the embedded engine (:class:`memcore.knowledge.KnowledgeGraph` over the SQLite
archive, ``synchronous=FULL`` as a shard runs it), in this process, no HTTP or Ray hop:

- ``add``: fact adds (each its own transaction) until ``--facts`` facts exist across ``--users`` users
  (entities drawn from a per-user pool, so the graph has hubs and chains); with ``--preload N`` the first
  ``facts - N`` facts are written in bulk instead (one transaction per user through the repository's
  ``write``, the path an import takes) and only the last ``N`` adds are timed, so that the latencies at
  1M facts are measured without a million timed transactions;
- ``supersede``: one move per user; ``query`` (facts of an entity, both directions), ``query_as_of`` (valid
  time), ``timeline``: random entities of random users;
- ``neighbourhood``: by hop count 1..3 (cost and entities reached).

Each figure is p50 / p90 / p99 in ms with a bootstrap 95% interval of p50 and p99. Writes JSON and a PNG::

    python -m bench.graph --facts 10000 --users 100 --out bench/results/graph.json
    python -m bench.graph --facts 1000000 --users 1000 --preload 10000 --out bench/results/graph_1m.json
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.timing import percentiles
from memcore.graph import Entity, Fact, entity_key, fact_id, predicate_key, version_id
from memcore.knowledge import KnowledgeGraph
from memcore.model import UserKey
from memcore.stores.sqlite_archive import SqliteArchive

PREDICATES = ("knows", "works_at", "lives_in", "likes", "member_of", "owns", "visited", "manages")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def interval(samples: Sequence[float], q: float, rounds: int = 300, seed: int = 7) -> list[float]:
    """Bootstrap 95% interval of the ``q`` percentile (ms)."""
    arr = np.asarray(samples, dtype=np.float64)
    rng = np.random.default_rng(seed)
    stats = np.percentile(rng.choice(arr, size=(rounds, arr.size), replace=True), q, axis=1)
    return [round(float(np.percentile(stats, 2.5)), 4), round(float(np.percentile(stats, 97.5)), 4)]


def summary(samples: Sequence[float]) -> dict[str, Any]:
    out: dict[str, Any] = percentiles(samples)
    if samples:
        out["p50_ci95"] = interval(samples, 50)
        out["p99_ci95"] = interval(samples, 99)
    return out


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """(ms, value) of ``fn(*args, **kwargs)``."""
    t0 = time.perf_counter()
    value = fn(*args, **kwargs)
    return (time.perf_counter() - t0) * 1e3, value


def triple(rng: random.Random, names: Sequence[str]) -> dict[str, str]:
    """A random fact of the entity pool ``names``, valid from a day in 2024-2025."""
    s, o = rng.sample(names, 2)
    return {"subject": s, "predicate": rng.choice(PREDICATES), "object": o,
            "valid_from": (T0 + timedelta(days=rng.randrange(700))).date().isoformat()}


def bulk_load(archive: SqliteArchive, keys: Sequence[UserKey], names: Sequence[str], count: int,
              rng: random.Random) -> float:
    """Write ``count`` facts (repeats are one fact, as with adds) across ``keys`` in one transaction per user,
    every entity of the pool declared; returns the seconds it took."""
    t0 = time.perf_counter()
    recorded = datetime.now(UTC)
    entities = [Entity(key=entity_key(n), name=n) for n in names]
    per_user = [count // len(keys) + (i < count % len(keys)) for i in range(len(keys))]
    for key, n in zip(keys, per_user, strict=True):
        facts: dict[str, Fact] = {}
        for _ in range(n):
            spec = triple(rng, names)
            valid_from = datetime.fromisoformat(spec["valid_from"]).replace(tzinfo=UTC)
            s, p, o = entity_key(spec["subject"]), predicate_key(spec["predicate"]), entity_key(spec["object"])
            line = fact_id(key, s, p, o, valid_from)
            facts[line] = Fact(id=version_id(line, recorded), fact_id=line, subject=s, subject_name=spec["subject"],
                               predicate=p, object=o, object_name=spec["object"], valid_from=valid_from,
                               recorded_at=recorded)
        archive.graph.write(key, at=recorded, add=list(facts.values()), entities=entities)
    return time.perf_counter() - t0


def run(facts: int, users: int, queries: int, seed: int = 1, preload: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    timed_adds = facts if preload is None else min(preload, facts)
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp:
        archive = SqliteArchive(Path(tmp) / "archive.sqlite3", Path(tmp) / "seq.sqlite3")
        kg = KnowledgeGraph(archive.graph, archive.diary)
        keys = [UserKey(app="bench", user=f"u{i}") for i in range(users)]
        pool = max(8, facts // users // 4)
        names = [f"entity {j}" for j in range(pool)]
        bulk_s = bulk_load(archive, keys, names, facts - timed_adds, rng) if timed_adds < facts else None
        add_ms: list[float] = []
        t_all = time.perf_counter()
        for i in range(timed_adds):
            key = keys[i % users]
            ms, _ = timed(kg.add, key, triple(rng, names))
            add_ms.append(ms)
        add_wall_s = time.perf_counter() - t_all
        stored = sum(archive.graph.count(k) for k in keys)
        move = {"subject": "entity 0", "predicate": "lives_in", "object": "Lisbon"}
        sup_ms = [timed(kg.supersede, key, move)[0] for key in keys]
        pick = [(rng.choice(keys), rng.choice(names)) for _ in range(queries)]
        q_ms = [timed(kg.query, k, {"entity": n})[0] for k, n in pick]
        asof_ms = [timed(kg.query, k, {"entity": n, "as_of": "2025-01-01"})[0] for k, n in pick]
        tl_ms = [timed(kg.timeline, k, n)[0] for k, n in pick]
        hood: dict[str, Any] = {}
        for hops in (1, 2, 3):
            samples, reached = [], []
            for k, n in pick[: max(50, queries // 4)]:
                ms, got = timed(kg.neighbourhood, k, {"entity": n, "hops": hops, "limit": 1000})
                samples.append(ms)
                reached.append(len(got["entities"]))
            hood[str(hops)] = {**summary(samples), "entities_mean": round(float(np.mean(reached)), 2)}
        size = (Path(tmp) / "archive.sqlite3").stat().st_size
        archive.close()
    return {
        "facts": facts, "facts_stored": stored, "users": users, "entities_per_user": pool, "queries": queries,
        "engine": "SQLite archive (synchronous=FULL, WAL), in process",
        "bulk_loaded": None if bulk_s is None else {"facts": facts - timed_adds, "wall_s": round(bulk_s, 2)},
        "add": {**summary(add_ms), "wall_s": round(add_wall_s, 3), "timed": timed_adds},
        "supersede": summary(sup_ms), "query": summary(q_ms), "query_as_of": summary(asof_ms),
        "timeline": summary(tl_ms), "neighbourhood_by_hops": hood, "archive_bytes": size,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    ops = ["add", "supersede", "query", "query_as_of", "timeline"]
    x = np.arange(len(ops))
    for off, q in ((-0.2, "p50"), (0.2, "p99")):
        left.bar(x + off, [result[o][q] for o in ops], width=0.4, label=q)
    left.set_xticks(x, ops, rotation=20)
    left.set_ylabel("ms")
    left.set_title(f"{result['facts']:,} facts, {result['users']} users")
    left.legend()
    hops = sorted(result["neighbourhood_by_hops"])
    hood = result["neighbourhood_by_hops"]
    right.plot([int(h) for h in hops], [hood[h]["p50"] for h in hops], "o-", label="p50")
    right.plot([int(h) for h in hops], [hood[h]["p99"] for h in hops], "s--", label="p99")
    right.set_xlabel("hops")
    right.set_ylabel("ms")
    right.set_title("neighbourhood cost by hops")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.graph", description=__doc__)
    p.add_argument("--facts", type=int, default=10_000)
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--preload", type=int, default=None,
                   help="time only the last N adds; the facts before them are written in bulk")
    p.add_argument("--out", type=Path, default=Path("bench/results/graph.json"))
    args = p.parse_args(argv)
    result = run(args.facts, args.users, args.queries, preload=args.preload)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    print(json.dumps(result, indent=2))
    return 0
