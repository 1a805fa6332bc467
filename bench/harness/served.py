"""What the benchmarks against a Serve deployment share (:mod:`bench.http_api`, :mod:`bench.instrumentation`,
:mod:`bench.load`): their users and data, written straight into the shard stores before Serve starts, the
request paths, and the one request loop.

The data: :func:`bench.harness.datasets.memory_texts` over ``users`` users of app ``bench``
(``user-0000`` ...), embedded once per embedder kind and cached (``http_<kind>``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.harness.datasets import embed_cached, memory_dataset, memory_texts
from bench.harness.locomo import load_locomo

APP = "bench"

Job = tuple[str, dict[str, Any]]
"""A request: path and JSON body."""


def user_id(u: int) -> str:
    return f"user-{u:04d}"


def key_of(u: int) -> Any:
    from memcore.model import UserKey

    return UserKey(app=APP, user=user_id(u))


def user_path(u: int, tail: str) -> str:
    """The API path of user ``u``'s ``tail`` (``"/memories/search"``, ...)."""
    return f"/v1/apps/{APP}/users/{user_id(u)}{tail}"


@dataclass(frozen=True)
class ServedData:
    """``entries`` memories (``Memory`` fields), the user of each, their vectors and the vector cache's metadata."""

    mems: list[dict[str, Any]]
    user_of: np.ndarray
    vecs: np.ndarray
    meta: dict[str, Any]


def served_data(embedder: Any, kind: str, entries: int, users: int, seed: int,
                log: Callable[[str], None] = print) -> ServedData:
    """The data of the served benchmarks, its vectors cached per embedder ``kind``."""
    texts, base = memory_texts(entries, seed)
    mems, user_of = memory_dataset(texts, base, seed, users)
    vecs, meta = embed_cached(f"http_{kind}", lambda m: memory_texts(m, seed)[0], entries, embedder.embed_passages,
                              log=log)
    return ServedData(mems, user_of, vecs, meta)


def aimed_questions(user_of: np.ndarray, n: int, seed: int) -> list[tuple[int, str]]:
    """``n`` distinct LoCoMo questions, each aimed at a random user that has entries: (user, question)."""
    _, questions = load_locomo()
    rng = np.random.default_rng(seed)
    owners = np.unique(user_of)
    return [(int(rng.choice(owners)), questions[int(i)].question)
            for i in rng.choice(len(questions), size=n, replace=False)]


def populate(settings: Any, embedder: Any, data: ServedData) -> list:
    """Write every entry straight into its shard's stores; returns the open ShardCores."""
    from actors.shard import ShardCore
    from memcore.ids import shard_of

    cores = [ShardCore(settings, k, embedder) for k in range(settings.shards)]
    t0 = time.perf_counter()
    for u in np.unique(data.user_of):
        idx = np.flatnonzero(data.user_of == u)
        key = key_of(int(u))
        core = cores[shard_of(key, settings.shards)]
        for lo in range(0, len(idx), 256):
            part = idx[lo : lo + 256]
            core.service.add_many(key, [data.mems[i] for i in part], vectors=data.vecs[part])
    print(f"populated {len(data.mems)} entries in {time.perf_counter() - t0:.0f}s", flush=True)
    return cores


def search_jobs(queries: list[tuple[int, str]]) -> list[Job]:
    """The search requests of ``queries`` ((user number, question) pairs)."""
    return [(user_path(u, "/memories/search"), {"query": q}) for u, q in queries]


async def run_jobs(base: str, concurrency: int, jobs: list[Job]) -> tuple[list[float], int, float]:
    """POST every job with ``concurrency`` clients: the latencies (ms), the error count and the wall time (s)."""
    import httpx

    lat: list[float] = []
    errors = 0
    queue: asyncio.Queue[Job] = asyncio.Queue()
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
