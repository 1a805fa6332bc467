"""The re-shard benchmark: how long ``memctl reshard`` takes per 100k entries (embedded stores).

    python -m bench.reshard [--entries 20000] [--users 200] [--dim 384] [--out bench/results/reshard.json]

Builds a data directory of 4 shards (Qdrant Edge entries with ``dim``-dimensional vectors, one archived turn
per entry and one finished extraction job per user in the shard's ``archive.sqlite3``, a write counter per
user), then changes its shard count three times (4 → 6 → 3 → 4) with the code ``memctl reshard`` runs
(:class:`cluster.reshard.Reshard`, in this process), timing each run. Each run moves every entry and turn, so
each is one sample of seconds per entry; the figure reported is seconds per 100k entries: the mean of the
runs and their range, extrapolated linearly from ``--entries`` (the work is per user and per entry: a scroll
of the user's points, an upsert, one archive transaction, one fsync of the progress log, and a keyword
rebuild of each new shard). Writes ``reshard.json``, ``.md`` and ``.png`` beside ``--out``.
"""

from __future__ import annotations

import itertools
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser as bench_parser
from bench.harness.report import RESULTS, load_average
from bench.reshard.report import report
from cluster.reshard import Reshard
from memcore import factory
from memcore.data_root import DataRoot
from memcore.extraction.events import Event
from memcore.ids import memory_id, shard_of
from memcore.layout import ShardLayout
from memcore.model import Entry, Memory, UserKey
from memcore.records import JobRecord
from memcore.settings import EmbedderSettings, Settings

COUNTS = (4, 6, 3, 4)
PAGE = 500
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def settings_of(data: Path, shards: int) -> Settings:
    return Settings(data_dir=data, shards=shards, embedder=EmbedderSettings(kind="hashing", dim=384))


def build(data: Path, shards: int, entries: int, users: int, dim: int, seed: int = 7) -> None:
    """``entries`` entries over ``users`` users (every tenth a tombstone), one archived turn per entry, one
    finished job per user, a write counter per user, all in the shard each user routes to."""
    rng = np.random.default_rng(seed)
    settings = settings_of(data, shards)
    per_user = entries // users
    stores = {k: factory.build_vector_store(ShardLayout(settings, k), dim) for k in range(shards)}
    archives = {k: factory.build_archive(ShardLayout(settings, k)) for k in range(shards)}
    try:
        for u in range(users):
            key = UserKey(app="bench", user=f"user-{u:05d}")
            k = shard_of(key, shards)
            batch: list[Entry] = []
            turns: list[Event] = []
            for i in range(per_user):
                text = f"user {u} memory {i}: likes item {rng.integers(1_000_000)} on day {i % 365}"
                at = T0 + timedelta(minutes=i)
                mem = Memory(text=text, topics=[f"t{i % 7}"])
                batch.append(Entry(id=memory_id(key, mem), app=key.app, user=key.user, created_at=at, updated_at=at,
                                   deleted_at=at if i % 10 == 9 else None, **mem.model_dump(exclude={"ttl_s"})))
                turns.append(Event(id=f"e{i}", role="user", content=text, timestamp=at))
            for start in range(0, len(batch), PAGE):
                chunk = batch[start:start + PAGE]
                vectors = rng.standard_normal((len(chunk), dim)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                stores[k].upsert(chunk, vectors)
            archives[k].events.append(key, "s1", turns)
            archives[k].events.mark_extracted(key, "s1")
            archives[k].jobs.create(JobRecord(job_id=f"{k}-{u:032x}", status="done", app=key.app, user=key.user,
                                              session="s1", created_at=T0, finished_at=T0))
            archives[k].sequence.next(key)
    finally:
        for s in stores.values():
            s.close()
        for a in archives.values():
            a.close()
    DataRoot(data).record(shards)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__name__, __doc__)
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--out", type=Path, default=RESULTS / "reshard.json")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-reshard-"))
    data = work / "data"
    try:
        t0 = time.perf_counter()
        build(data, COUNTS[0], args.entries, args.users, args.dim)
        build_s = time.perf_counter() - t0
        runs: list[dict[str, Any]] = []
        for before, after in itertools.pairwise(COUNTS):
            load = load_average()
            cpu0 = time.process_time()
            summary = Reshard(settings_of(data, before), after).run()
            runs.append({"from": before, "to": after, "seconds": summary.seconds, "entries": summary.entries,
                         "cpu_s": round(time.process_time() - cpu0, 2),
                         "turns": summary.turns, "users": summary.users, "load_average_before": load,
                         "s_per_100k_entries": summary.seconds * 100_000 / summary.entries})
            print(f"{before} -> {after}: {summary.seconds:.2f} s for {summary.entries} entries", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per = [r["s_per_100k_entries"] for r in runs]
    headline = {"mean": statistics.mean(per), "min": min(per), "max": max(per),
                "stdev": statistics.stdev(per) if len(per) > 1 else 0.0}
    config = {"entries": args.entries, "users": args.users, "dim": args.dim, "counts": list(COUNTS),
              "build_s": round(build_s, 2)}
    report(runs, headline, config, args.out)
    print(f"reshard: {headline['mean']:.1f} s per 100k entries (runs {headline['min']:.1f}..{headline['max']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
