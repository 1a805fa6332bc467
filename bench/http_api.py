"""HTTP benchmark: search and add latency/throughput through the Ray Serve API, beside the
in-process engine on the same data in the same run.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m bench.http_api --entries 100000'

1. N memory texts over 1,000 users (bench/data.py's LoCoMo-derived data), embedded once
   with the configured embedder (cached under bench/results/cache/), written straight into
   the shard stores of a fresh data directory (4 shards, as `memctl up` deploys);
2. in-process: ``ShardCore.search`` / ``ShardCore.add`` on those stores (query embedding included);
3. HTTP: the same stores behind Ray Serve (ingress + embedder deployment + shard actors) on
   127.0.0.1, at concurrency 1, 8 and 32 with httpx, once per ingress (``http.ingress``): Serve's
   proxy actor, and Serve's HAProxy mode (a fresh Ray cluster each).
Writes bench/results/http_api.json, .png and .md. The cost of instrumentation (search p50 with
metrics on vs off, same run, same stores) is :mod:`bench.instrumentation`, built on this module.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.data import embed_cached, load_locomo, memory_dataset, memory_texts
from bench.report import RESULTS, machine_info, md_table, plot_style, write_json
from bench.serve_cluster import start_serve, stop_serve
from bench.timing import percentiles

APP = "bench"


def key_of(u: int) -> Any:
    from memcore.model import UserKey

    return UserKey(app=APP, user=f"user-{u:04d}")


def dataset(embedder: Any, kind: str, entries: int, users: int, n_queries: int, seed: int,
            ) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray, dict[str, Any], list[tuple[int, str]]]:
    """The HTTP benchmarks' data: ``entries`` memories over ``users`` users, their vectors (cached per
    embedder ``kind``) and the cache's metadata, and ``n_queries`` LoCoMo questions, each aimed at a user."""
    texts, base = memory_texts(entries, seed)
    mems, user_of = memory_dataset(texts, base, seed, users)
    vecs, meta = embed_cached(f"http_{kind}", lambda m: memory_texts(m, seed)[0], entries, embedder.embed_passages)
    _, questions = load_locomo()
    rng = np.random.default_rng(seed)
    owners = np.unique(user_of)
    queries = [(int(rng.choice(owners)), questions[int(i)].text)
               for i in rng.choice(len(questions), size=n_queries, replace=False)]
    return mems, user_of, vecs, meta, queries


def populate(settings: Any, embedder: Any, mems: list[dict[str, Any]], user_of: np.ndarray, vecs: np.ndarray) -> list:
    """Write every entry straight into its shard's stores; returns the open ShardCores."""
    from actors.shard import ShardCore
    from memcore.ids import shard_of

    cores = [ShardCore(settings, k, embedder) for k in range(settings.shards)]
    t0 = time.perf_counter()
    for u in np.unique(user_of):
        idx = np.flatnonzero(user_of == u)
        key = key_of(int(u))
        core = cores[shard_of(key, settings.shards)]
        for lo in range(0, len(idx), 256):
            part = idx[lo : lo + 256]
            core.service.add_many(key, [mems[i] for i in part], vectors=vecs[part])
    print(f"populated {len(mems)} entries in {time.perf_counter() - t0:.0f}s", flush=True)
    return cores


def in_process(cores: list, settings: Any, queries: list[tuple[int, str]], adds: int) -> dict[str, Any]:
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
    return {"search": percentiles(search_ms), "add": percentiles(add_ms)}


Job = tuple[str, dict[str, Any]]
"""A request: path and JSON body."""


def search_jobs(queries: list[tuple[int, str]]) -> list[Job]:
    """The search requests of ``queries`` ((user number, question) pairs)."""
    return [(f"/v1/apps/{APP}/users/user-{u:04d}/memories/search", {"query": q}) for u, q in queries]


async def run_jobs(base: str, concurrency: int, jobs: list[Job]) -> tuple[list[float], int, float]:
    """POST every job with ``concurrency`` clients: the latencies (ms), the error count and the wall time (s).
    The one request loop of the HTTP benchmarks (:mod:`bench.instrumentation` uses it too)."""
    import httpx

    lat: list[float] = []
    errors = 0
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:

        async def worker() -> None:
            nonlocal errors
            while not queue.empty():
                path, body = queue.get_nowait()
                t0 = time.perf_counter()
                r = await client.post(path, json=body)
                lat.append((time.perf_counter() - t0) * 1e3)
                if r.status_code >= 400:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return lat, errors, wall


async def _drive(base: str, concurrency: int, jobs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    lat, errors, wall = await run_jobs(base, concurrency, jobs)
    return {**percentiles(lat), "throughput_rps": round(len(jobs) / wall, 1), "errors": errors}


def over_http(settings: Any, queries: list[tuple[int, str]], levels: list[int], adds: int, port: int) -> dict:
    """The HTTP figures with ``settings.http.ingress``; Ray starts with the environment memctl gives it."""
    base = start_serve(settings, port)

    def path(u: int, tail: str) -> str:
        return f"/v1/apps/{APP}/users/user-{u:04d}{tail}"

    out: dict[str, Any] = {"search": {}, "add": {}}
    warm = search_jobs(queries[:30])
    asyncio.run(_drive(base, 4, warm))
    out["breakdown"] = breakdown(base, settings, queries)
    print("breakdown:", out["breakdown"], flush=True)
    for c in levels:
        jobs = search_jobs(queries)
        out["search"][str(c)] = asyncio.run(_drive(base, c, jobs))
        add_jobs = [(path(queries[i % len(queries)][0], "/memories"),
                     {"text": f"http bench note {c}-{i} about {queries[i % len(queries)][1]}"}) for i in range(adds)]
        out["add"][str(c)] = asyncio.run(_drive(base, c, add_jobs))
        print(f"c={c}: search {out['search'][str(c)]} add {out['add'][str(c)]}", flush=True)
    stop_serve()
    return out


def breakdown(base: str, settings: Any, queries: list[tuple[int, str]]) -> dict[str, Any]:
    """Where a search's time goes, one request at a time: the Serve floor (``GET /healthz``: proxy
    + ingress replica, no work), the query embedding in this process, and the shard actor's search
    called straight from the driver with the vector given (one Ray hop + the engine)."""
    import httpx
    import ray

    from actors.router import RayShardBackend
    from memcore.factory import build_embedder
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

    embedder = build_embedder(settings.embedder)
    backend = RayShardBackend(settings)
    vectors = embedder.embed_queries([q for _, q in queries])
    with httpx.Client(base_url=base, timeout=30) as client:
        floor = timed(lambda i: client.get("/healthz"))

    def actor_search(i: int) -> None:
        u, q = queries[i % len(queries)]
        handle = backend.actor(shard_of(key_of(u), settings.shards))
        ray.get(handle.search.remote(key_of(u), {"query": q}, vectors[i % len(queries)]))

    return {"http_floor_healthz": floor,
            "embed_query": timed(lambda i: embedder.embed_queries([queries[i % len(queries)][1]])),
            "actor_search_vector_given": timed(actor_search)}


INGRESS_LABEL = {"proxy": "Serve proxy", "haproxy": "HAProxy"}


def report(res: dict[str, Any]) -> str:
    lines = [f"HTTP API vs in-process, {res['config']['entries']:,} entries, {res['config']['shards']} shards, "
             f"embedder {res['config']['embedder']} (load average at start {res['machine'].get('load_average')})", ""]
    rows = [["in-process", "", "1", _fmt(res["in_process"]["search"]), "", _fmt(res["in_process"]["add"]), ""]]
    for mode, http in res["http"].items():
        for c, srch in http["search"].items():
            a = http["add"][c]
            rows.append(["HTTP", INGRESS_LABEL.get(mode, mode), c, _fmt(srch), f"{srch['throughput_rps']}", _fmt(a),
                         f"{a['throughput_rps']}"])
    lines += md_table(["path", "ingress", "concurrency", "search p50/p99 ms", "search req/s", "add p50/p99 ms",
                       "add req/s"], rows)
    lines += ["", *(f"- {t}" for t in res["targets"])]
    parts = {mode: http["breakdown"] for mode, http in res["http"].items() if http.get("breakdown")}
    if parts:
        lines += ["", "Where a search's time goes (one request at a time, ms p50 / p99):", ""]
        modes = list(parts)
        lines += md_table(["part", *(INGRESS_LABEL.get(m, m) for m in modes)], [
            ["HTTP floor: GET /healthz through the ingress (no work)",
             *(_fmt(parts[m]["http_floor_healthz"]) for m in modes)],
            ["query embedding (in process)", *(_fmt(parts[m]["embed_query"]) for m in modes)],
            ["shard actor search from the driver, vector given (one Ray hop + engine)",
             *(_fmt(parts[m]["actor_search_vector_given"]) for m in modes)],
            ["HTTP search, c=1 (all of it)", *(_fmt(res["http"][m]["search"]["1"]) for m in modes)],
        ])
    return "\n".join(lines) + "\n"


def _fmt(p: dict[str, float]) -> str:
    return f"{p['p50']:.1f} / {p['p99']:.1f}"


def targets(res: dict[str, Any]) -> list[str]:
    inproc = res["in_process"]["search"]
    out = []
    for mode, http in res["http"].items():
        s1 = http["search"]["1"]
        over = s1["p50"] - inproc["p50"]
        label = INGRESS_LABEL.get(mode, mode)
        out += [
            f"{label}: HTTP search p50 <= 10 ms at concurrency 1: {s1['p50']:.1f} ms -> "
            f"{'PASS' if s1['p50'] <= 10 else 'FAIL'}",
            f"{label}: HTTP search p99 <= 40 ms at concurrency 1: {s1['p99']:.1f} ms -> "
            f"{'PASS' if s1['p99'] <= 40 else 'FAIL'}",
            f"{label}: HTTP overhead <= 3 ms over in-process at p50: {over:.1f} ms -> "
            f"{'PASS' if over <= 3 else 'FAIL'}",
            f"{label}: errors: {sum(v['errors'] for op in ('search', 'add') for v in http[op].values())}",
        ]
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, op in zip(axes, ("search", "add"), strict=True):
        labels = ["in-process"]
        p50 = [res["in_process"][op]["p50"]]
        p99 = [res["in_process"][op]["p99"]]
        for mode, http in res["http"].items():
            for c in http[op]:
                labels.append(f"{INGRESS_LABEL.get(mode, mode)}\nc={c}")
                p50.append(http[op][c]["p50"])
                p99.append(http[op][c]["p99"])
        x = np.arange(len(labels))
        ax.bar(x - 0.2, p50, 0.4, label="p50")
        ax.bar(x + 0.2, p99, 0.4, label="p99")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title(f"{op} latency ({res['config']['entries']:,} entries)")
        if op == "search":
            ax.axhline(10, color="#d62728", ls="--", lw=1, label="target p50 10 ms")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--adds", type=int, default=100)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--embedder", default=None, help="embedder kind (default: the settings default)")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--ingress", nargs="+", choices=["proxy", "haproxy"], default=["proxy", "haproxy"],
                   help="HTTP ingresses to measure (http.ingress), each on a fresh Ray cluster")
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
    mems, user_of, vecs, meta, queries = dataset(embedder, settings.embedder.kind, args.entries, args.users,
                                                 args.queries, args.seed)
    res: dict[str, Any] = {"machine": machine_info(), "config": {
        "entries": args.entries, "users": args.users, "shards": settings.shards, "queries": args.queries,
        "adds": args.adds, "embedder": embedder.name, "embed_passages_per_s": meta.get("passages_per_s")}}
    cores = populate(settings, embedder, mems, user_of, vecs)
    res["in_process"] = in_process(cores, settings, queries, args.adds)
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


if __name__ == "__main__":
    raise SystemExit(main())
