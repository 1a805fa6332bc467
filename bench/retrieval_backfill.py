"""The retrieval benchmark's ingest through the real backfill job (``--via backfill``, ``python -m bench locomo``).

The LoCoMo file is converted by :mod:`jobs.locomo` (each conversation one user of app ``locomo``),
written by :func:`jobs.backfill.run_backfill` (Ray Data: validate → verbatim extraction with the
settings' ``extractor.backfill_granularity`` → embed → shard actors) into fresh shard actors of a
private namespace and data directory, and searched through those actors
(``ShardCore.search`` with the query vector given, one Ray call per question). Ray is started
locally (``address="local"``) unless this process is already connected to a cluster.

Latency measured this way includes the Ray call (about a millisecond).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo import APP, Conversation
from memcore.model import UserKey
from memcore.search_model import SearchHit, SearchOptions

Log = Callable[[str], None]


def ensure_ray(num_cpus: int = 2) -> bool:
    """Connect to (or start) Ray; True when this call started it (the caller shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_worker_niceness", "0")  # same priority as the driver on a shared machine
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False, object_store_memory=500_000_000, namespace="memcluster-bench")
    return True


def ingest_backfill(
    data: Path, limit: int | None, convs: Sequence[Conversation], spec: Any, embedders: Any, knobs: Any, log: Log,
    *, workdir: Path | None = None, shards: int = 1,
) -> Any:
    """Backfill ``data`` (its first ``limit`` conversations) into fresh shard actors; an ``Ingested`` over them."""
    import ray

    from actors.router import RayShardBackend
    from bench.retrieval_kit import Ingested
    from jobs import common, locomo
    from jobs.backfill import BackfillOptions, Source, run_backfill
    from memcore.settings import Settings

    started = ensure_ray()
    tmp = tempfile.TemporaryDirectory(prefix="locomo-backfill-", dir=workdir)
    namespace = f"bench-locomo-{uuid.uuid4().hex[:8]}"
    settings = Settings.model_validate({
        "data_dir": Path(tmp.name) / "data", "shards": shards, "namespace": namespace,
        "embedder": {"kind": spec.embedder}, "service": {"candidate_pool": knobs.pool},
        "extractor": {"backfill_granularity": spec.granularity, "window": spec.window},
    })
    handles = RayShardBackend(settings).ensure_all()
    ray.get([h.ping.remote() for h in handles])

    def close() -> None:
        for h in handles:
            try:
                ray.get(h.close.remote(), timeout=60)
            finally:
                ray.kill(h, no_restart=True)
        common.forget_handles(namespace)
        tmp.cleanup()
        if started:
            ray.shutdown()

    try:
        rows = locomo.rows(data, APP, limit=limit)
        t0 = time.perf_counter()
        summary = run_backfill(settings, Source(rows=rows, label=str(data)), BackfillOptions(progress_s=30.0),
                               log=log)
        seconds = time.perf_counter() - t0
        if not summary.ok:
            raise RuntimeError(f"backfill failed: {summary.error or summary.failures[:3]}")
    except BaseException:
        close()
        raise
    from memcore.ids import shard_of

    keys = {c.user: UserKey(app=APP, user=c.user) for c in convs}

    def search(key: UserKey, opts: SearchOptions, qvec: np.ndarray) -> list[SearchHit]:
        hits: list[SearchHit] = ray.get(handles[shard_of(key, shards)].search.remote(key, opts, qvec))
        return hits

    meta = {"via": "backfill", "backfill": {"entries": summary.entries, "turns": summary.turns,
                                            "wall_s": round(summary.wall_s, 2),
                                            "turns_per_s": round(summary.turns_per_s, 1)}}
    return Ingested(search, keys, summary.entries, seconds, [close], meta)
