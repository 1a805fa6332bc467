"""Retrieval quality on LoCoMo: session / turn recall@k, NDCG@10, tokens@10 and search latency.

    python -m bench.retrieval                                 # every configuration, LoCoMo-10
    python -m bench.retrieval --quick                         # 2 conversations
    python -m bench.retrieval --configs hybrid-turn,bm25-turn --out /tmp/r.json
    python -m bench.retrieval --via backfill --configs tuned-window1-merged   # through the backfill job (Ray)
    python -m bench locomo --data FILE --out RESULT.json         # the default configuration, --via backfill

The configurations are :mod:`bench.retrieval.configs`. The default (``tuned-window1-merged``) is the
engine's own default path: the backfill job's default verbatim granularity (``window``, +-1 turn) and
``SearchOptions()`` with every fusion knob at the service's default (weighted RRF k=10 with BM25
weight 2, the BM25 query without stop words, the date boost, overlapping windows merged).
``hybrid-turn`` is the seeds' engine as it was (verbatim turns, plain RRF k=60); the other
configurations set search options or shape results (:mod:`bench.retrieval.shape`: spans read from
the raw-turn archive, whole sessions) to measure one idea each.

In-process (default ``--via inprocess``), every conversation (one user each) is ingested with the
verbatim extractor into a fresh MemoryService (Qdrant Edge in a temp dir + Tantivy + the embedder;
passage vectors cached in ``bench/results/cache``), one per way of indexing (configurations that
differ only in search options or result shaping share it). ``--via backfill`` converts the file
with ``jobs/locomo.py`` and runs the real backfill job into shard actors instead
(:func:`bench.retrieval.ingest.ingest_backfill`). Each configuration then searches once per question
with the question text, top 10.
Results map to turn ids through entry provenance; scoring is :mod:`bench.retrieval.recall` (as in
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

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.cli import parser
from bench.harness.locomo import LOCOMO, Conversation, load, turn_ids
from bench.harness.report import RESULTS, load_average, machine_info, write_json
from bench.harness.timing import percentiles
from bench.retrieval.budget import budget_summary, write_budget_report
from bench.retrieval.configs import (
    CONFIGS,
    DEFAULT,
    EXTRA_CONFIGS,
    IDEAS,
    SESSION_SEARCH,
    Config,
    index_keys,
    session_spec,
)
from bench.retrieval.ingest import Embedders, IndexSpec, Ingested, ingest, ingest_backfill
from bench.retrieval.recall import (
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
from bench.retrieval.report import GOAL, goal_met, write_reports
from bench.retrieval.shape import Archive, shape


class Indexes:
    """Ingested indexes, shared by the configurations that index the same way (same spec and pool)."""

    def __init__(self, data: Dataset, embedders: Embedders, log: Any, via: str, workdir: Path | None = None) -> None:
        self.data, self.embedders, self.log, self.via, self.workdir = data, embedders, log, via, workdir
        self._open: dict[IndexSpec, Ingested] = {}

    def get(self, spec: IndexSpec) -> Ingested:
        if spec not in self._open:
            convs = self.data.convs(spec.captions)
            if self.via == "backfill":
                self._open[spec] = ingest_backfill(self.data.path, self.data.limit, convs, spec, self.log,
                                                   workdir=self.workdir)
            else:
                self._open[spec] = ingest(convs, spec, self.embedders, self.log, workdir=self.workdir)
        return self._open[spec]

    def keep_only(self, needed: set[IndexSpec]) -> None:
        for spec in [k for k in self._open if k not in needed]:
            self._open.pop(spec).close()


def run_config(cfg: Config, data: Dataset, indexes: Indexes) -> dict[str, Any]:
    """One search per question with evidence over the configuration's index, scored."""
    t0 = time.perf_counter()
    convs = data.convs(cfg.spec.captions)
    archive = data.archive(cfg.spec.captions)
    ing = indexes.get(cfg.spec)
    sessions: Ingested | None = None
    if cfg.post.session_index:  # a second, session-level index (BM25 only) ranks sessions
        sessions = indexes.get(session_spec(cfg.spec))
    asked = [(conv, qa) for conv in convs for qa in conv.questions if qa.evidence]
    qvecs, embed_ms = indexes.embedders.queries(cfg.spec.embedder, [qa.question for _, qa in asked])
    scored: list[Scored] = []
    search_ms: list[float] = []
    for (conv, qa), qvec in zip(asked, qvecs, strict=True):
        key = ing.keys[conv.user]
        opts = cfg.options(qa.question)
        t2 = time.perf_counter()
        hits = ing.search(key, opts, qvec)
        session_hits = None
        if sessions is not None:
            session_hits = sessions.search(key, SESSION_SEARCH.model_copy(update={"query": qa.question}), qvec)
        results = shape(hits, cfg.post, conv.user, archive, session_hits)
        search_ms.append((time.perf_counter() - t2) * 1e3)
        prov = [r.provenance for r in results]
        metrics = score(prov, [r.text for r in results], qa.evidence)
        for b in BUDGETS:  # the engine's own max_tokens search: what fits, scored over all of it
            fitted = ing.search(key, opts.model_copy(update={"max_results": BUDGET_RESULTS, "max_tokens": b}), qvec)
            metrics |= budget_score([turn_ids(h.entry.provenance) for h in fitted], [h.entry.text for h in fitted],
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
    ap = parser(__name__, __doc__)
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
    log(f"{len(convs)} conversations, {sum(len(s.turns) for c in convs for s in c.sessions)} turns, "
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
