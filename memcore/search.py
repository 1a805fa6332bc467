"""One search pass over a user's stores: the dense and BM25 lists, their weighted fusion, the date boost.

:class:`memcore.settings.SearchDefaults` holds the service-wide defaults of the fusion knobs (part of
:class:`memcore.settings.ServiceConfig`, so ``MEMCLUSTER_SERVICE__RRF_K=60`` and the like set them);
a :class:`SearchOptions` field left ``None`` takes its default. The defaults are what the LoCoMo
retrieval benchmark measured best (``bench/results/retrieval.md``; README, "Benchmarks"):

- weighted RRF with k = 10, the BM25 list weighing 2 and the dense list 1 (plain RRF: k = 60, 1 and 1);
- the BM25 list searches the query without stop words and question words (``keyword_query="content"``);
- date boost: a query naming a day or a month ("on 7 July, 2023", "in August 2023") is searched
  a second time inside [start - ``date_boost_before_days``, end + ``date_boost_after_days``]
  (intersected with the caller's time range), and the two fused lists are fused again (RRF, same k);
- merging verbatim windows that share turns (:func:`memcore.fusion.merge_overlapping`) is applied
  by the service after dedup;
- every hit carries its ``relevance`` (:mod:`memcore.relevance`: the query/memory cosine, from the dense
  list, or for a hit only BM25 found from the vector the store returns with it, less the penalty for the
  query's names the memory lacks); ``similarity_threshold`` keeps the hits at or above it (hybrid too);
  without one a hybrid search keeps every hit.

Pure with respect to its inputs: the stores are read, never written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from memcore import fusion, tracing
from memcore.ids import point_id
from memcore.metadata import matches, pushdown
from memcore.model import Entry, Kind, UserKey
from memcore.ports import KeywordIndex, Vectors, VectorStore
from memcore.query import content_query, query_dates, query_names
from memcore.relevance import Judge, cosines, floor_of
from memcore.search_model import SearchHit, SearchOptions
from memcore.settings import SearchDefaults
from memcore.vocabulary import KeywordQuery


@dataclass(frozen=True)
class Knobs:
    """The effective knobs of one search: the options, their ``None`` fields from the defaults."""

    rrf_k: int
    dense_weight: float
    keyword_weight: float
    keyword_query: KeywordQuery
    date_boost: bool
    merge_overlapping: bool

    @classmethod
    def of(cls, opts: SearchOptions, defaults: SearchDefaults) -> Knobs:
        def pick(name: str) -> object:
            value = getattr(opts, name)
            return getattr(defaults, name) if value is None else value

        return cls(**{name: pick(name) for name in cls.__dataclass_fields__})  # type: ignore[arg-type]


FETCH_CHUNK = 32
"""Fewest fused candidates a hybrid pass resolves at a time when the caller needs only the first hits."""


def search_once(
    vectors: VectorStore, keywords: KeywordIndex, defaults: SearchDefaults, key: UserKey, opts: SearchOptions,
    qvec: Vectors, kind: Kind | None, *, need: int | None = None, alive: Callable[[Entry], bool] | None = None,
) -> list[SearchHit]:
    """Ranked hits of one pass (no dedup, merge, truncation or kind fallback: the service does those).

    ``alive``: entries it rejects (expired) are left out. ``need``: the caller reads only the first ``need``
    hits, so the hybrid pass resolves the fused list in order, a chunk at a time, and stops once it has them:
    the entries only the keyword list found are fetched for those chunks alone (a 40k-entry user's search
    fetched ~75 of them for 10 results). The hits returned are then the first ones of the full result, in
    its order (at least ``need`` of them, when that many exist)."""
    knobs = Knobs.of(opts, defaults)
    merging = knobs.merge_overlapping and opts.hybrid
    pool = max(defaults.candidate_pool, opts.max_results * (3 if opts.deduplicate or merging else 1))
    meta = pushdown(opts.metadata_filter)
    judge = Judge(query_names(opts.query))
    if not opts.hybrid:
        with tracing.store_span("memcluster.vector_search", db_system(vectors), "search", memcluster__pool=pool) as sp:
            dense = vectors.search(key, qvec, limit=pool, kind=kind, time_from=opts.time_from, time_to=opts.time_to,
                                   metadata=meta, topics=opts.topics or (), topics_match=opts.topics_match)
            if sp is not None:
                sp.set_attribute("memcluster.results", len(dense))
        floor = floor_of(opts.similarity_threshold, hybrid=False)
        judged = [(e, s, judge(s, e.text)) for e, s in dense]
        on_cosine = opts.similarity_threshold is None  # the seeds' default threshold is on the cosine
        return [_hit(e, s, r) for e, s, r in judged if (floor is None or (s if on_cosine else r) >= floor)
                and matches(e.metadata, opts.metadata_filter) and (alive is None or alive(e))]
    period, rest = query_dates(opts.query) if knobs.date_boost else (None, opts.query)
    text = content_query(rest) if knobs.keyword_query == "content" else rest
    lists = _Lists(vectors, keywords, key, qvec, kind, text, pool, knobs, meta, opts)
    fused = lists.fused(opts.time_from, opts.time_to)
    if period is not None:
        lo = period[0] - timedelta(days=defaults.date_boost_before_days)
        hi = period[1] + timedelta(days=defaults.date_boost_after_days)
        lo = max(lo, opts.time_from) if opts.time_from is not None else lo
        hi = min(hi, opts.time_to) if opts.time_to is not None else hi
        if lo <= hi:
            inside = lists.fused(lo, hi)
            fused = fusion.rrf([[i for i, _ in fused], [i for i, _ in inside]], k=knobs.rrf_k)
    cos = lists.cos
    known: dict[str, Entry] = {}
    floor = floor_of(opts.similarity_threshold, hybrid=True)
    hits: list[SearchHit] = []
    step = len(fused) if need is None else max(need, FETCH_CHUNK)
    for start in range(0, len(fused), max(step, 1)):
        chunk = fused[start: start + step]
        wanted = [p for p, _ in chunk if p not in known]
        if wanted:
            with tracing.store_span("memcluster.fetch_entries", db_system(vectors), "retrieve",
                                    memcluster__count=len(wanted)):
                found, rows = vectors.get_points(key, wanted)
            for e, c in zip(found, cosines(qvec, rows), strict=True):
                if e.active:
                    p = point_id(e.id)
                    known[p] = e
                    cos.setdefault(p, c)  # a dense hit keeps the cosine its list scored
        judged = [(known[p], s, judge(cos[p], known[p].text)) for p, s in chunk if p in known]
        hits += [_hit(e, s, r) for e, s, r in judged if (floor is None or r >= floor)
                 and matches(e.metadata, opts.metadata_filter) and (alive is None or alive(e))]
        if need is not None and len(hits) >= need:
            break
    return hits


def _hit(entry: Entry, score: float, relevance: float) -> SearchHit:
    """A hit of values this module computed (a stored entry, float scores): built without validation, which
    cost ~10 µs a hit and a fused list holds ~150-200 candidates. Every field is given: for a default factory
    ``model_construct`` inspects the factory's signature on each call, which costs more than validating."""
    return SearchHit.model_construct(entry=entry, score=score, relevance=relevance, merged=[], cut=[])


def db_system(store: object) -> str:
    """A store's ``db.system.name`` for spans (its ``db_system``, else its class name)."""
    return str(getattr(store, "db_system", type(store).__name__))


class _Lists:
    """The dense and BM25 lists of one query within a time range, fused by point id
    (:func:`memcore.ids.point_id`: the dense list reads no entries); remembers the dense cosines."""

    def __init__(self, vectors: VectorStore, keywords: KeywordIndex, key: UserKey, qvec: Vectors,
                 kind: Kind | None, text: str, pool: int, knobs: Knobs, meta: tuple[tuple[str, str], ...],
                 opts: SearchOptions) -> None:
        self.vectors, self.keywords, self.key, self.qvec, self.meta = vectors, keywords, key, qvec, meta
        self.topics, self.topics_match = tuple(opts.topics or ()), opts.topics_match
        self.kind, self.text, self.pool, self.knobs = kind, text, pool, knobs
        self.cos: dict[str, float] = {}
        """Point id → its relevance (the dense list's cosine), for the points the dense lists returned."""

    def fused(self, time_from: datetime | None, time_to: datetime | None) -> list[tuple[str, float]]:
        kn = self.knobs
        rankings: list[list[str]] = []
        weights: list[float] = []
        if kn.dense_weight > 0 or kn.keyword_weight <= 0:
            with tracing.store_span("memcluster.vector_search", db_system(self.vectors), "search",
                                    memcluster__pool=self.pool) as sp:
                dense = self.vectors.search_points(self.key, self.qvec, limit=self.pool, kind=self.kind,
                                                   time_from=time_from, time_to=time_to, metadata=self.meta,
                                                   topics=self.topics, topics_match=self.topics_match)
                if sp is not None:
                    sp.set_attribute("memcluster.results", len(dense))
            self.cos.update(dense)
            rankings.append([p for p, _ in dense])
            weights.append(kn.dense_weight if kn.dense_weight > 0 else 1.0)
        if kn.keyword_weight > 0:
            with tracing.store_span("memcluster.keyword_search", db_system(self.keywords), "search",
                                    memcluster__pool=self.pool) as sp:
                sparse = self.keywords.search(self.key, self.text, limit=self.pool, kind=self.kind,
                                              time_from=time_from, time_to=time_to, topics=self.topics,
                                              topics_match=self.topics_match)
                if sp is not None:
                    sp.set_attribute("memcluster.results", len(sparse))
            rankings.append([point_id(i) for i, _ in sparse])
            weights.append(kn.keyword_weight)
        return fusion.rrf(rankings, k=kn.rrf_k, weights=weights)
