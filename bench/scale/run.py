"""Scale benchmark: the cost curve of the shards from 10k to 1M entries (issue 16, part 2).

    python -m bench.scale --sizes 10000 100000 1000000
    python -m bench.scale --sizes 2000 5000 --queries 40        # quick run

In-process, no Ray: ``settings.shards`` (default 4) :class:`actors.shard.ShardCore` objects on a temp data
dir, opened as a shard actor opens its stores (Qdrant Edge, Tantivy, the SQLite archive), users routed by
:func:`memcore.ids.shard_of`. One store grows through the sizes; all of it is written through
``ShardCore.backfill`` (the backfill job's bulk write: archive rows + entries with their vectors + cursors).
Population and vectors: :mod:`bench.scale.population` (many users, Pareto sizes; LoCoMo texts; vectors mixed from
real embeddings of the default embedder). Queries: LoCoMo questions, embedded by the default embedder.

At each size: search p50/p99 (hybrid, default options; query vector given and end to end) for small users
(at most the median size) and the largest users; queries/s single and batched; a fresh batch written by
``backfill`` and by ``add_many`` (calls of ``--probe-per-call`` entries, each to a random stored user); RSS
of each store kind (each opened alone in a child process) and disk bytes by store; shard restart (open;
open with the keyword index lost, rebuilt from the vector store).
Results are saved after every size (a long run keeps what it measured).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.locomo import load_locomo
from bench.harness.memory import peak_rss_mb, rss_mb
from bench.harness.report import load_average, machine_info, write_json
from bench.scale.population import APP, backfill_calls, fresh_calls, population, user_key
from bench.scale.probes import Shards, disk_bytes, restart, search_latency, store_rss, throughput, write_batch
from bench.scale.report import markdown, plots


def load_to(shards: Shards, pop: Any, lo: int, hi: int, batch: int, log: Any) -> dict[str, Any]:
    """Backfill entries ``lo .. hi-1``; throughput per window of about a tenth of the range."""
    t0, windows = time.perf_counter(), []
    step = max(batch, (hi - lo) // 10)
    for wlo in range(lo, hi, step):
        w = write_batch(shards, list(backfill_calls(pop, wlo, min(hi, wlo + step), batch)), "backfill")
        windows.append({"from": wlo, **w, "rss_mb": rss_mb()})
        log(f"loaded {min(hi, wlo + step):,}: {w['entries_per_s']:.0f} entries/s, rss {rss_mb():.0f} MB, "
            f"load {w['load_average']}")
    secs = time.perf_counter() - t0
    return {"entries": hi - lo, "seconds": round(secs, 1), "entries_per_s": round((hi - lo) / secs, 1),
            "windows": windows}


def pick_users(pop: Any, n: int, seed: int, small: int, large: int) -> dict[str, Any]:
    sizes = pop.sizes(n)
    median = float(np.median(sizes))
    rng = np.random.default_rng(seed + n)
    small_ids = rng.choice(np.flatnonzero(sizes <= median), size=min(small, int((sizes <= median).sum())),
                           replace=False)
    large_ids = np.argsort(-sizes)[:large]
    return {"small": [int(u) for u in small_ids], "large": [int(u) for u in large_ids],
            "small_sizes": [int(sizes[u]) for u in small_ids], "large_sizes": [int(sizes[u]) for u in large_ids],
            "all": rng.choice(len(sizes), size=400).tolist(),
            "population": {"users": len(sizes), "median": median, "p90": float(np.percentile(sizes, 90)),
                           "p99": float(np.percentile(sizes, 99)), "max": int(sizes.max()),
                           "users_10k_plus": int((sizes >= 10_000).sum()),
                           "share_in_users_1k_plus": round(float(sizes[sizes >= 1000].sum() / n), 3)}}


def measure(shards: Shards, pop: Any, n: int, args: Any, q: tuple[list[str], np.ndarray], tmp: Path,
            log: Any) -> dict[str, Any]:
    qtexts, qvecs = q
    picked = pick_users(pop, n, args.seed, args.small_users, args.large_users)
    r: dict[str, Any] = {"entries": n, "entries_per_shard": shards.entries(), "users": picked["population"],
                         "rss_mb_process": rss_mb(), "peak_rss_mb_process": peak_rss_mb(),
                         "load_average_start": load_average()}
    nq = args.queries
    lat = {}
    for cls in ("small", "large"):
        keys = [user_key(u) for u in picked[cls]]
        lat[cls] = search_latency(shards, keys, qtexts[:nq], qvecs[:nq], args.warmup) | {
            "user_sizes": picked[f"{cls}_sizes"]}
        log(f"{n:,} {cls}: given {lat[cls]['vector_given']['p50']:.2f}/{lat[cls]['vector_given']['p99']:.2f} ms, "
            f"e2e {lat[cls]['end_to_end']['p50']:.2f}/{lat[cls]['end_to_end']['p99']:.2f} ms")
    r["search"] = lat
    mixed = [user_key(u) for u in picked["all"]]
    r["throughput"] = throughput(shards, mixed, qtexts[:nq], qvecs[:nq], args.threads, args.embed_batch)
    log(f"{n:,} throughput {r['throughput']}")
    fresh = n + args.probe_batch
    per = args.probe_per_call
    r["write"] = {"backfill": write_batch(shards, list(fresh_calls(pop, n, fresh, n, per, args.seed)), "backfill"),
                  "add_many": write_batch(shards, list(fresh_calls(pop, fresh, fresh + args.probe_batch, n, per,
                                                                   args.seed)), "add_many"),
                  "per_call": per}
    log(f"{n:,} write {r['write']}")
    shards.commit()
    r["disk_bytes"] = disk_bytes(Path(shards.settings.data_dir))
    stored = sum(shards.entries())
    r["disk_bytes_per_entry"] = {k: round(v / stored, 1) for k, v in r["disk_bytes"].items()}
    if not args.no_rss:
        qfile = tmp / "qvecs.npy"
        np.save(qfile, qvecs[:nq])
        probe = {"app": APP, "users": [user_key(u).user for u in picked["all"][:200]], "qvecs": str(qfile),
                 "queries": qtexts[:nq], "dim": shards.embedder.dim}
        shards.close()  # each store is opened alone by a child (the engines lock their directories)
        r["store_rss"] = store_rss(shards.settings, probe, tmp)
        for v in r["store_rss"].values():
            if "store_mb" in v:
                v["bytes_per_entry"] = round(v["store_mb"] * 2**20 / stored, 1)
        log(f"{n:,} store rss {r['store_rss']}")
    r["restart"] = restart(shards)  # leaves the shards open
    log(f"{n:,} restart {r['restart']}")
    r["stored_entries"] = stored
    r["load_average_end"] = load_average()
    return r


def main(argv: list[str] | None = None) -> int:
    ap = parser(__name__, __doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200, help="timed queries per mode and user class")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--small-users", type=int, default=50)
    ap.add_argument("--large-users", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8, help="concurrent searches of the batched throughput")
    ap.add_argument("--embed-batch", type=int, default=32, help="queries per embedding call, batched e2e")
    ap.add_argument("--add-batch", type=int, default=256, help="most entries per backfill/add_many call")
    ap.add_argument("--probe-batch", type=int, default=2000, help="fresh entries written per size and method")
    ap.add_argument("--probe-per-call", type=int, default=16,
                    help="fresh entries per call, each call to a random user already stored")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-rss", action="store_true", help="skip the per-store RSS children")
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the shards here (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    args = ap.parse_args(argv)
    log = lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)  # noqa: E731
    from memcore.factory import build_embedder
    from memcore.settings import Settings

    sizes = sorted(set(args.sizes))
    res: dict[str, Any] = {"config": {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                      "argv": " ".join(sys.argv[1:] if argv is None else argv)},
                           "machine": machine_info(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.data_dir) as tmpdir:
        tmp = Path(tmpdir)
        settings = Settings(data_dir=tmp / "data", shards=Settings().shards)
        embedder = build_embedder(settings.embedder)
        t0 = time.perf_counter()
        pop = population(max(sizes) + 2 * args.probe_batch, embedder.embed_passages, embedder.name, seed=args.seed,
                         log=log)
        questions = load_locomo()[1]
        order = np.random.default_rng(args.seed + 5).permutation(len(questions))
        qtexts = [questions[int(order[i % len(order)])].question for i in range(args.queries)]
        qvecs = np.asarray(embedder.embed_queries(qtexts), dtype=np.float32)
        res["embedder"] = {"kind": settings.embedder.kind, "name": embedder.name, "dim": embedder.dim}
        res["data"] = {"seconds_to_build": round(time.perf_counter() - t0, 1), "mix": pop.mix, "noise": pop.noise,
                       "users_total": len(pop.starts) - 1}
        res["config"]["shards"] = settings.shards
        log(f"population ready: {len(pop.texts):,} entries, {len(pop.starts) - 1:,} users, rss {rss_mb():.0f} MB")
        shards = Shards(settings, embedder)
        shards.open()
        done = 0
        try:
            for n in sizes:
                # the previous size's probes wrote entries up to done, to users already stored
                res.setdefault("load", {})[str(n)] = load_to(shards, pop, done, n, args.add_batch, log)
                done = n + 2 * args.probe_batch
                res["sizes"][str(n)] = measure(shards, pop, n, args, (qtexts, qvecs), tmp, log)
                res["load_average_end"] = load_average()
                write_json(args.out, res)
                log(f"saved {args.out} ({n:,})")
        finally:
            shards.close()
    plots([res], args.out.with_suffix(""))
    md = markdown(res)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0
