"""The cost of instrumentation, measured with the HTTP benchmark's data and request loop
(:mod:`bench.harness.served`): the same stores behind Ray Serve, search at concurrency 1, with
metrics on (``ray.util.metrics`` recorder installed in the ingress and the shard actors) and off
(``MEMCLUSTER_METRICS=0``), in alternating rounds of one run (a fresh Ray cluster per round), so
drift hits both arms alike.
Tracing stays off in both arms (no OTLP endpoint), which is the default.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m bench.instrumentation --entries 5000'

Writes bench/results/instrumentation.json and .md.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.local_ray import start_serve, stop_serve
from bench.harness.report import RESULTS, machine_info, write_json
from bench.harness.served import aimed_questions, populate, run_jobs, search_jobs, served_data
from bench.harness.timing import percentiles
from bench.instrumentation.report import LIMIT_PCT, render


def one_round(settings: Any, queries: list[tuple[int, str]], port: int, metrics: bool) -> list[float]:
    """Search latencies (ms) of every query at concurrency 1 on a fresh cluster, metrics on or off
    (:func:`bench.harness.served.run_jobs`, the HTTP benchmark's loop)."""
    os.environ["MEMCLUSTER_METRICS"] = "1" if metrics else "0"
    base = start_serve(settings, port)
    try:
        jobs = search_jobs(queries)
        asyncio.run(run_jobs(base, 1, jobs[:40]))  # warm-up
        lat, errors, _ = asyncio.run(run_jobs(base, 1, jobs))
        if errors:
            raise RuntimeError(f"{errors} searches failed")
        return lat
    finally:
        stop_serve()


def delta_interval(on: list[float], off: list[float], *, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95 % bootstrap interval of the p50 difference on vs off (%): each arm's latencies resampled."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(on), np.asarray(off)
    d = [(np.median(rng.choice(a, a.size)) / np.median(rng.choice(b, b.size)) - 1) * 100 for _ in range(n)]
    lo, hi = np.percentile(d, [2.5, 97.5])
    return round(float(lo), 2), round(float(hi), 2)


def main(argv: list[str] | None = None) -> int:
    p = parser(__name__, __doc__)
    p.add_argument("--entries", type=int, default=5000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--rounds", type=int, default=4, help="rounds per arm, alternating on/off (ABBA order)")
    p.add_argument("--port", type=int, default=8124)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS / "instrumentation.json"))
    args = p.parse_args(argv)

    from memcore.factory import build_embedder
    from memcore.settings import Settings

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="memcluster-instr-bench-")), shards=4,
                        namespace="memcluster-bench")
    embedder = build_embedder(settings.embedder)
    data = served_data(embedder, settings.embedder.kind, args.entries, args.users, args.seed)
    queries = aimed_questions(data.user_of, args.queries, args.seed)
    for core in populate(settings, embedder, data):
        core.close()
    lat: dict[str, list[float]] = {"on": [], "off": []}
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
            got = one_round(settings, queries, args.port, arm == "on")
            lat[arm] += got
            rounds.append({"round": r, "metrics": arm, "p50": round(float(np.median(got)), 3)})
            print(f"round {r} metrics {arm}: p50 {np.median(got):.2f} ms", flush=True)
    arms = {arm: percentiles(v) for arm, v in lat.items()}
    delta = (arms["on"]["p50"] - arms["off"]["p50"]) / arms["off"]["p50"] * 100
    res = {"machine": machine_info(), "config": {"entries": args.entries, "users": args.users,
                                                 "queries": args.queries, "rounds": args.rounds,
                                                 "shards": settings.shards, "embedder": embedder.name},
           "search_c1": arms, "rounds": rounds,
           "p50_delta_pct": round(delta, 2), "p50_delta_ci95_pct": list(delta_interval(lat["on"], lat["off"])),
           "within_limit": delta <= LIMIT_PCT}
    out = Path(args.out)
    write_json(out, res)
    md = render(res)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0
