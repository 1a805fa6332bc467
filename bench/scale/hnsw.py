"""Why a large user's search cost grows with its size, and what a dedicated HNSW store built off the shard
does (before / during / after).

    python -m bench.scale.hnsw --population 1000000 --others 20000

One shard (``ShardCore``, no Ray) holding the largest user of :mod:`bench.scale`'s 1M population plus the
first ``--others`` entries (other users). Search latency (hybrid, vector given and end to end) for that user
and for small users, and the time split of the large user's search (:func:`bench.engine.run.breakdown`).
Then the large user is promoted (:meth:`memcore.stores.edge_tiers.TieredEdgeStore.build`: export, HNSW
build in another process, switch) in a background thread while this one keeps searching small users and
writing small users' entries (each call timed: the "during" figures, against the same calls with no build
running); then the same measurements again. Writes ``bench/results/scale_hnsw.json``.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.run import breakdown
from bench.harness.cli import parser
from bench.harness.locomo import load_locomo
from bench.harness.memory import rss_mb
from bench.harness.report import load_average, machine_info, write_json
from bench.harness.timing import percentiles
from bench.scale.population import backfill_calls, population, user_key
from bench.scale.probes import Shards, search_latency, write_batch


def side_traffic(shards: Shards, small: list[Any], qt: list[str], qv: np.ndarray, writes: list[Any],
                 until: Any, *, searches: int = 20, per_round: int = 5) -> dict[str, Any]:
    """Rounds of ``searches`` small-user searches (vector given) then ``per_round`` entry writes, each call
    timed, with the keyword index committed (untimed) after each round's writes, as its background committer
    would (a search right after a write would otherwise pay the commit), until ``until()`` is true or the
    writes run out; p50/p99 of each."""
    search_ms: list[tuple[float, float]] = []
    write_ms: list[tuple[float, float]] = []
    j = w = 0
    while not until() and w < len(writes):
        for _ in range(searches):
            key = small[j % len(small)]
            t0 = time.perf_counter()
            shards.core(key).search(key, {"query": qt[j % len(qt)]}, qv[j % len(qt)])
            search_ms.append((t0, (time.perf_counter() - t0) * 1e3))
            j += 1
        for wkey, _sessions, mems, vecs in writes[w:w + per_round]:
            t0 = time.perf_counter()
            shards.core(wkey).add_many(wkey, mems, vecs)
            write_ms.append((t0, (time.perf_counter() - t0) * 1e3))
        w += per_round
        shards.commit()
    return {"search": percentiles([ms for _, ms in search_ms]), "write": percentiles([ms for _, ms in write_ms]),
            "load_average": load_average(), "samples": {"search": search_ms, "write": write_ms}}


def by_phase(during: dict[str, Any], start: float, build: dict[str, Any]) -> dict[str, Any]:
    """The "during" calls split by the build's phase at their start: the export (on the shard's process, its
    pages holding the GIL a moment each), the build process (HNSW, off the shard's process) and the catch-up
    and switch after it; p50/p99 of each (from the calls' start times and the phases' durations)."""
    export_end = start + float(build.get("export_s", 0.0))
    build_end = export_end + float(build.get("build_s", 0.0))
    out: dict[str, Any] = {}
    for kind, samples in during.pop("samples").items():
        phases: dict[str, list[float]] = {"export": [], "build": [], "catch_up_switch": []}
        for t0, ms in samples:
            phases["export" if t0 < export_end else "build" if t0 < build_end else "catch_up_switch"].append(ms)
        out[kind] = {name: percentiles(ms) for name, ms in phases.items() if ms}
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    """p50 / p99 of the large user's search before and after its dedicated store, and of small users' searches
    and writes without and during the build."""
    from bench.harness.report import plot_style

    plt = plot_style()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    bars = {"large, before": res["before"]["large"]["vector_given"],
            "large, after": res["after"]["large"]["vector_given"]}
    without, during = res["side_without_build"], res["side_during_build"]
    side = {"search, no build": without["search"], "search, during": during["search"],
            "write, no build": without["write"], "write, during": during["write"]}
    for ax, data, title in ((ax1, bars, f"Largest user ({res['large_user_entries']:,} entries), hybrid, vector given"),
                            (ax2, side, "Other users during the build (off the shard's process)")):
        names = list(data)
        for j, q in enumerate(("p50", "p99")):
            ax.bar([i + (j - 0.5) * 0.35 for i in range(len(names))], [data[n][q] for n in names], 0.35, label=q,
                   color=f"C{j}")
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(title, fontsize=9)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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
    ap.add_argument("--side-calls", type=int, default=100, help="timed small-user writes with no build running")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale_hnsw.json"))
    args = ap.parse_args(argv)
    from memcore.factory import build_embedder
    from memcore.settings import Settings, VectorStoreSettings

    res: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info()}
    with tempfile.TemporaryDirectory(prefix="bench-scale-hnsw-", dir=args.data_dir) as tmp:
        # promotion by hand (below), never by the maintenance size rule in the middle of a measurement
        settings = Settings(data_dir=Path(tmp) / "data", shards=1,
                            vector_store=VectorStoreSettings(dedicated_min_entries=0))
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
            n_writes = 20 * args.side_calls  # other users' entries, one per call (never the large user's)
            first = hi if hi + n_writes <= args.population else args.others
            writes = list(backfill_calls(pop, first, first + n_writes, 1))
            res["side_without_build"] = side_traffic(shards, small, qt, qv, writes[: args.side_calls],
                                                     lambda: False)
            res["side_without_build"].pop("samples")
            vectors = shards.cores[0].service.vectors
            built: dict[str, Any] = {}
            worker = threading.Thread(target=lambda: built.update(vectors.build(user_key(big))))
            t0 = time.perf_counter()
            worker.start()
            res["side_during_build"] = side_traffic(shards, small, qt, qv, writes[args.side_calls:],
                                                    lambda: not worker.is_alive())
            worker.join()
            res["build"] = {**built, "seconds": round(time.perf_counter() - t0, 1), "load_average": load_average()}
            res["side_during_build_by_phase"] = by_phase(res["side_during_build"], t0, built)
            res["after"] = measure(shards, big, small, qt, qv, args.warmup)
        finally:
            shards.close()
    res["load_average_end"] = load_average()
    write_json(args.out, res)
    plot(res, args.out.with_suffix(".png"))
    for k in ("before", "after"):
        r = res[k]
        print(f"{k}: large ({res['large_user_entries']:,} entries) given {r['large']['vector_given']['p50']:.2f} / "
              f"{r['large']['vector_given']['p99']:.2f} ms, small {r['small']['vector_given']['p50']:.2f} / "
              f"{r['small']['vector_given']['p99']:.2f} ms; split {r['large_breakdown_ms']}")
    for k in ("side_without_build", "side_during_build"):
        r = res[k]
        print(f"{k}: small search {r['search'].get('p50')} / {r['search'].get('p99')} ms, write "
              f"{r['write'].get('p50')} / {r['write'].get('p99')} ms (n={r['search']['n']})")
    print(f"build {res['build']}")
    for kind, phases in res["side_during_build_by_phase"].items():
        print(f"during the build, small {kind} by phase: " + ", ".join(
            f"{name} {v['p50']:.2f} / {v['p99']:.2f} ms (n={v['n']})" for name, v in phases.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
