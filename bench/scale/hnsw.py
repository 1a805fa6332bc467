"""Why a large user's search cost grows with its size, and what building HNSW does (before/after).

    python -m bench.scale.hnsw --population 1000000 --others 20000

One shard (``ShardCore``, no Ray) holding the largest user of :mod:`bench.scale`'s 1M population plus the
first ``--others`` entries (other users). Search latency (hybrid, vector given and end to end) for that user
and for small users, the time split of the large user's search (:func:`bench.engine.run.breakdown`), then
``QdrantEdgeStore.optimize`` (HNSW build; Qdrant Edge has no background optimizer, so its segments stay
plain — brute force over the user's points — until it is called) timed, and the same measurements again.
Writes ``bench/results/scale_hnsw.json``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.run import breakdown
from bench.harness.cli import parser
from bench.harness.locomo import load_locomo
from bench.harness.memory import rss_mb
from bench.harness.report import load_average, machine_info, write_json
from bench.scale.population import backfill_calls, population, user_key
from bench.scale.probes import Shards, search_latency, write_batch


def measure(shards: Shards, big: int, small: list[Any], qt: list[str], qv: np.ndarray, warmup: int) -> dict:
    svc = shards.cores[0].service
    b = breakdown(svc, [(q, user_key(big)) for q in qt], qv)
    return {"large": search_latency(shards, [user_key(big)], qt, qv, warmup),
            "small": search_latency(shards, small, qt, qv, warmup),
            "large_breakdown_ms": b["mean_ms_per_query"], "rss_mb": rss_mb()}


def main(argv: list[str] | None = None) -> int:
    ap = parser("bench.scale.hnsw", __doc__)
    ap.add_argument("--population", type=int, default=1_000_000)
    ap.add_argument("--others", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale_hnsw.json"))
    args = ap.parse_args(argv)
    from memcore.factory import build_embedder
    from memcore.settings import Settings

    res: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info()}
    with tempfile.TemporaryDirectory(prefix="bench-scale-hnsw-", dir=args.data_dir) as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", shards=1)
        emb = build_embedder(settings.embedder)
        pop = population(args.population, emb.embed_passages, emb.name, seed=args.seed, log=lambda _m: None)
        sizes = pop.sizes(args.population)
        big = int(np.argmax(sizes))
        lo, hi = int(pop.starts[big]), int(pop.starts[big + 1])
        shards = Shards(settings, emb)
        shards.open()
        try:
            res["load"] = [write_batch(shards, list(backfill_calls(pop, 0, args.others, 256)), "backfill"),
                           write_batch(shards, list(backfill_calls(pop, lo, hi, 256)), "backfill")]
            res["large_user_entries"], res["entries"] = hi - lo, sum(shards.entries())
            qs = load_locomo()[1]
            qt = [q.question for q in qs[: args.queries]]
            qv = np.asarray(emb.embed_queries(qt), dtype=np.float32)
            small = [user_key(u) for u in range(5, 60) if u != big]
            res["before"] = measure(shards, big, small, qt, qv, args.warmup)
            vectors = shards.cores[0].service.vectors
            t0 = time.perf_counter()
            vectors.optimize()
            res["optimize"] = {"seconds": round(time.perf_counter() - t0, 1), "load_average": load_average()}
            res["after"] = measure(shards, big, small, qt, qv, args.warmup)
        finally:
            shards.close()
    res["load_average_end"] = load_average()
    write_json(args.out, res)
    for k in ("before", "after"):
        r = res[k]
        print(f"{k}: large ({res['large_user_entries']:,} entries) given {r['large']['vector_given']['p50']:.2f} / "
              f"{r['large']['vector_given']['p99']:.2f} ms, small {r['small']['vector_given']['p50']:.2f} / "
              f"{r['small']['vector_given']['p99']:.2f} ms; split {r['large_breakdown_ms']}")
    print(f"optimize {res['optimize']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
