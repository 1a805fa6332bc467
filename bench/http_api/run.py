"""HTTP benchmark: search and add latency/throughput through the Ray Serve API, beside the
in-process engine on the same data in the same run.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m bench.http_api --entries 100000'

1. N memory texts over 1,000 users (:mod:`bench.harness.served`: LoCoMo-derived data), embedded
   once with the configured embedder (cached under bench/results/cache/), written straight into
   the shard stores of a fresh data directory (4 shards, as `memctl up` deploys);
2. in-process: ``ShardCore.search`` / ``ShardCore.add`` on those stores (query embedding included);
3. HTTP: the same stores behind Ray Serve (ingress + embedder deployment + shard actors) on
   127.0.0.1, at concurrency 1, 8 and 32 with httpx, once per ingress (``http.ingress``): Serve's
   proxy actor, and Serve's HAProxy mode (a fresh Ray cluster each).
Writes bench/results/http_api.json, .png and .md. The cost of instrumentation (search p50 with
metrics on vs off, same run, same stores) is :mod:`bench.instrumentation`, on the same data and
request loop (:mod:`bench.harness.served`).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import cpu
from bench.harness.cli import parser
from bench.harness.local_ray import start_serve, stop_serve
from bench.harness.report import RESULTS, machine_info, write_json
from bench.harness.served import (
    Job,
    aimed_questions,
    key_of,
    populate,
    run_jobs,
    search_jobs,
    served_data,
    user_path,
)
from bench.harness.timing import percentiles
from bench.http_api.report import plot, report, targets

THREADED = ("Serve replica Ingress", "actor ShardCore", cpu.CLIENT)
"""The processes whose CPU each level also reports by thread."""


def query_embedder(settings: Any) -> Any:
    """The query embedder as the ingress replica builds it (its own thread count), else the shards' one."""
    from memcore.factory import build_embedder
    from serve_apps.ingress import build_query_embedder

    return build_query_embedder(settings) or build_embedder(settings.embedder)


def in_process(cores: list, settings: Any, embedder: Any, queries: list[tuple[int, str]], adds: int) -> dict[str, Any]:
    """Search and add latency on the shard cores in this process, and the CPU (all threads of this process)
    of the two parts every HTTP search also does: embedding its query (``embedder``: as the ingress does) and
    the engine's search with the vector given."""
    from memcore.ids import shard_of

    def core_of(u: int) -> Any:
        return cores[shard_of(key_of(u), settings.shards)]

    for u, q in queries[:20]:
        core_of(u).search(key_of(u), {"query": q})
    search_ms = []
    for u, q in queries:
        t0 = time.perf_counter()
        core_of(u).search(key_of(u), {"query": q})
        search_ms.append((time.perf_counter() - t0) * 1e3)
    add_ms = []
    for i in range(adds):
        u = queries[i % len(queries)][0]
        t0 = time.perf_counter()
        core_of(u).add(key_of(u), {"text": f"in-process bench note {i} about {queries[i % len(queries)][1]}"})
        add_ms.append((time.perf_counter() - t0) * 1e3)
    vectors = embedder.embed_queries([q for _, q in queries])
    t0 = time.process_time()
    for _, q in queries:
        embedder.embed_queries([q])
    embed_cpu = (time.process_time() - t0) * 1e3 / len(queries)
    t0 = time.process_time()
    for (u, q), vector in zip(queries, vectors, strict=True):
        core_of(u).search(key_of(u), {"query": q}, vector)
    engine_cpu = (time.process_time() - t0) * 1e3 / len(queries)
    return {
        "search": percentiles(search_ms),
        "add": percentiles(add_ms),
        "cpu_ms": {"embed_query": round(embed_cpu, 2), "search_vector_given": round(engine_cpu, 2)},
    }


async def _drive(base: str, concurrency: int, jobs: list[Job]) -> dict[str, Any]:
    lat, errors, wall = await run_jobs(base, concurrency, jobs)
    return {**percentiles(lat), "throughput_rps": round(len(jobs) / wall, 1), "errors": errors}


def over_http(settings: Any, queries: list[tuple[int, str]], levels: list[int], adds: int, port: int) -> dict:
    """The HTTP figures with ``settings.http.ingress``; Ray starts with the environment memctl gives it.

    Each level's searches also report the CPU every process spent per search, and the ingress replica's,
    the shard actors' and this process's by thread (:mod:`bench.harness.cpu`: ``/proc``, read before and
    after, which costs the processes nothing)."""
    base = start_serve(settings, port)
    out: dict[str, Any] = {"search": {}, "add": {}, "cpu": {}}
    warm = search_jobs(queries[:30])
    asyncio.run(_drive(base, 4, warm))
    out["breakdown"] = breakdown(base, settings, queries)
    print("breakdown:", out["breakdown"], flush=True)
    for c in levels:
        jobs = search_jobs(queries)
        before = cpu.snapshot()
        threaded = cpu.pids_of(before, *THREADED)
        threads_before = cpu.threads([pid for _, pid in threaded])
        out["search"][str(c)] = asyncio.run(_drive(base, c, jobs))
        threads_after = cpu.threads([pid for _, pid in threaded])
        out["cpu"][str(c)] = {
            **cpu.cpu_by_role(before, cpu.snapshot(), requests=len(jobs)),
            "threads_ms": cpu.threads_by_role(threaded, threads_before, threads_after, requests=len(jobs)),
        }
        add_jobs = [
            (
                user_path(queries[i % len(queries)][0], "/memories"),
                {"text": f"http bench note {c}-{i} about {queries[i % len(queries)][1]}"},
            )
            for i in range(adds)
        ]
        out["add"][str(c)] = asyncio.run(_drive(base, c, add_jobs))
        print(f"c={c}: search {out['search'][str(c)]} add {out['add'][str(c)]} cpu {out['cpu'][str(c)]}", flush=True)
    stop_serve()
    return out


def breakdown(base: str, settings: Any, queries: list[tuple[int, str]]) -> dict[str, Any]:
    """Where a search's time goes, one request at a time: the Serve floor (``GET /healthz``: proxy
    + ingress replica, no work), the query embedding in this process, and the shard actor's search
    called straight from the driver with the vector given (one Ray hop + the engine)."""
    import httpx
    import ray

    from actors.router import RayShardBackend
    from memcore.ids import shard_of

    def timed(fn: Any, n: int = 200) -> dict[str, float]:
        for _ in range(20):
            fn(0)
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            lat.append((time.perf_counter() - t0) * 1e3)
        return percentiles(lat)

    embedder = query_embedder(settings)
    backend = RayShardBackend(settings)
    vectors = embedder.embed_queries([q for _, q in queries])
    with httpx.Client(base_url=base, timeout=30) as client:
        floor = timed(lambda i: client.get("/healthz"))

    def actor_search(i: int) -> None:
        u, q = queries[i % len(queries)]
        handle = backend.actor(shard_of(key_of(u), settings.shards))
        ray.get(handle.search.remote(key_of(u), {"query": q}, vectors[i % len(queries)]))

    return {
        "http_floor_healthz": floor,
        "embed_query": timed(lambda i: embedder.embed_queries([queries[i % len(queries)][1]])),
        "actor_search_vector_given": timed(actor_search),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__name__, __doc__)
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--adds", type=int, default=100)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--embedder", default=None, help="embedder kind (default: the settings default)")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument(
        "--ingress",
        nargs="+",
        choices=["proxy", "haproxy"],
        default=["proxy", "haproxy"],
        help="HTTP ingresses to measure (http.ingress), each on a fresh Ray cluster",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS / "http_api.json"))
    args = p.parse_args(argv)

    from memcore.factory import build_embedder
    from memcore.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="memcluster-http-bench-"))
    overrides: dict[str, Any] = {"data_dir": data_dir, "shards": 4, "namespace": "memcluster-bench"}
    if args.embedder:
        overrides["embedder"] = {"kind": args.embedder}
    settings = Settings(**overrides)
    embedder = build_embedder(settings.embedder)
    data = served_data(embedder, settings.embedder.kind, args.entries, args.users, args.seed)
    queries = aimed_questions(data.user_of, args.queries, args.seed)
    res: dict[str, Any] = {
        "machine": machine_info(),
        "config": {
            "entries": args.entries,
            "users": args.users,
            "shards": settings.shards,
            "queries": args.queries,
            "adds": args.adds,
            "embedder": embedder.name,
            "embed_passages_per_s": data.meta.get("passages_per_s"),
        },
    }
    cores = populate(settings, embedder, data)
    res["in_process"] = in_process(cores, settings, query_embedder(settings), queries, args.adds)
    print("in-process:", res["in_process"], flush=True)
    for core in cores:
        core.close()
    res["http"] = {}
    for mode in args.ingress:
        mode_settings = settings.model_copy(update={"http": settings.http.model_copy(update={"ingress": mode})})
        res["http"][mode] = over_http(mode_settings, queries, args.levels, args.adds, args.port)
    res["targets"] = targets(res)
    out = Path(args.out)
    write_json(out, res)
    plot(res, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(report(res))
    print(report(res))
    return 0
