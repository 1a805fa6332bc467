"""Does a hit's ``relevance`` tell a matching memory from an unrelated one? LoCoMo, own user vs another user.

    python -m bench.relevance                      # LoCoMo-10, every question of categories 1-4
    python -m bench.relevance --limit 3 --out /tmp/relevance.json     # a subset (3 conversations)

Every conversation is one user of one in-process :class:`memcore.service.MemoryService` written as the
engine writes it by default (:data:`bench.retrieval.configs.DEFAULT_CFG`: verbatim windows +-1 turn, the
default embedder ``minilm-l3``, passage vectors cached in ``bench/results/cache``;
:func:`bench.retrieval.ingest.ingest`). For each question of categories 1-4 with evidence:

- the **own** search: the question against its own conversation's user, default options (no floor); the
  top hit's ``relevance`` (:mod:`memcore.relevance`: the query/memory cosine less the penalty for the
  query's names the memory lacks), its cosine alone and its fused ``score``;
- the **cross** search: the same question against another conversation's user (conversation i asks
  conversation i + 1), whose memories do not hold the answer; the same two numbers of its top hit;
- the same two searches with ``similarity_threshold`` at each floor of :data:`FLOORS`
  (:data:`memcore.relevance.DEFAULT_FLOOR` among them): is the cross search emptied, and what is the own
  search's session recall any@5 (:mod:`bench.retrieval.recall`);
- derived without more searches, a floor on the search instead of on each hit (``gate``: a search whose
  best returned hit is below the floor returns nothing, else its hits as they are; preload's floor), and the
  same of the cosine alone (``gate_cosine``: what a query that names nobody gets);
- at the default floor, the cross searches emptied and the any@5 drop of each half of the conversations
  apart (``halves``), to see whether the default holds on conversations it was not chosen on.

Separation is the AUC of own vs cross top-hit values (the probability that a random own top hit outscores a
random cross one; ties count half), with a 95 % bootstrap interval (questions resampled, 1,000 times), for
the relevance, its cosine alone, the fused score and the keyword evidence (share of the query's content
words in the top hit). Writes ``bench/results/relevance.json`` / ``.md`` /
``.png`` (or ``--out`` and the files beside it). Nothing reads the QA answers; evidence only scores recall.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.locomo import LOCOMO, Conversation, load, turn_ids
from bench.harness.report import RESULTS, load_average, machine_info, write_json
from bench.relevance.report import write_reports
from bench.retrieval.configs import DEFAULT_CFG
from bench.retrieval.ingest import Embedders, ingest
from bench.retrieval.recall import MAIN_CATEGORIES, bootstrap_ci, score
from memcore.query import content_query, query_names
from memcore.relevance import DEFAULT_FLOOR, Judge
from memcore.search_model import SearchHit
from memcore.text import tokenize

FLOORS: tuple[float, ...] = tuple(sorted({0.25, 0.3, 0.35, 0.4, 0.45, DEFAULT_FLOOR}))
"""The floors measured (``similarity_threshold``)."""
SIGNALS = ("relevance", "cosine", "fused_score", "keyword")
TARGETS = {"auc": 0.95, "cross_emptied": 0.85, "recall_drop": 0.01}
"""The issue's targets: AUC of the relevance, share of cross searches the default floor empties, largest
own-user any@5 drop."""
BOOT = 1000


def keyword_evidence(query: str, text: str) -> float:
    """Share of the query's content words (:func:`memcore.query.content_query`) in ``text``: 0..1."""
    words = set(tokenize(content_query(query)))
    return len(words & set(tokenize(text))) / len(words) if words else 0.0


def cosine_of(query: str, hit: SearchHit) -> float:
    """A hit's cosine alone: its relevance without the penalty for the query's names it lacks
    (:class:`memcore.relevance.Judge`), what a query that names nobody is judged by; -1 for no relevance."""
    if hit.relevance is None:
        return -1.0
    return float(hit.relevance) + Judge(query_names(query)).penalty(hit.entry.text)


def top_values(query: str, hits: Sequence[SearchHit]) -> dict[str, float]:
    """The top hit's signals (relevance, its cosine alone, fused score, keyword evidence); -1 / 0 for no hit."""
    if not hits:
        return {"relevance": -1.0, "cosine": -1.0, "fused_score": 0.0, "keyword": 0.0}
    top = hits[0]
    rel = float(top.relevance if top.relevance is not None else -1.0)
    return {"relevance": rel, "cosine": cosine_of(query, top), "fused_score": float(top.score),
            "keyword": keyword_evidence(query, top.entry.text)}


def gate_of(base: Sequence[float], own_best: Sequence[float], cross_best: Sequence[float]) -> dict[str, Any]:
    """A floor on the search instead of each hit, derived without more searches: a search whose best hit is
    below the floor returns nothing, else its hits as they are; per floor, the cross searches emptied and the
    own any@5 kept (``base``: each question's own any@5 without a floor)."""
    out: dict[str, dict[str, Any]] = {}
    for f in FLOORS:
        kept = [r if b >= f else 0.0 for r, b in zip(base, own_best, strict=True)]
        flags = [float(b < f) for b in cross_best]
        out[f"{f:g}"] = {"cross_emptied": round(float(np.mean(flags)), 4), "cross_emptied_ci95": share_ci(flags),
                         "any@5": round(float(np.mean(kept)), 4),
                         "any@5_drop": round(float(np.mean(base)) - float(np.mean(kept)), 4)}
    return out


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a random ``pos`` > a random ``neg``), ties counted half (Mann-Whitney U / (n_pos * n_neg))."""
    both = np.concatenate([pos, neg])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both), dtype=np.float64)
    ranks[order] = np.arange(1, len(both) + 1)
    for v in np.unique(both):  # average ranks of ties
        same = both == v
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def auc_ci(pos: np.ndarray, neg: np.ndarray, n: int = BOOT, seed: int = 25) -> list[float]:
    """95 % percentile bootstrap interval of :func:`auc`, resampling questions (own and cross pairs together)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(pos), size=(n, len(pos)))
    values = [auc(pos[i], neg[i]) for i in idx]
    return [round(float(np.percentile(values, 2.5)), 4), round(float(np.percentile(values, 97.5)), 4)]


def share_ci(flags: Sequence[float], n: int = BOOT, seed: int = 25) -> list[float]:
    """95 % percentile bootstrap interval of a share (the mean of 0/1 flags)."""
    return bootstrap_ci([{"x": f} for f in flags], ["x"], n=n, seed=seed)["x"]


def run(convs: Sequence[Conversation], log: Any = print, workdir: Path | None = None) -> dict[str, Any]:
    cfg = DEFAULT_CFG
    embedders = Embedders(log)
    t0 = time.perf_counter()
    ing = ingest(convs, cfg.spec, embedders, log, workdir=workdir)
    log(f"ingested {ing.entries} entries in {ing.seconds:.1f} s")
    asked = [(i, qa) for i, conv in enumerate(convs) for qa in conv.questions
             if qa.evidence and qa.category in MAIN_CATEGORIES]
    qvecs, _ = embedders.queries(cfg.spec.embedder, [qa.question for _, qa in asked])
    own_top: dict[str, list[float]] = {s: [] for s in SIGNALS}
    cross_top: dict[str, list[float]] = {s: [] for s in SIGNALS}
    recall: dict[str, list[float]] = {"none": [], **{f"{f:g}": [] for f in FLOORS}}
    emptied: dict[str, list[float]] = {f"{f:g}": [] for f in FLOORS}
    own_emptied: dict[str, list[float]] = {f"{f:g}": [] for f in FLOORS}
    own_best: list[float] = []  # the best relevance among the own search's returned hits
    cross_best: list[float] = []
    own_best_cos: list[float] = []  # the same, of the cosine alone
    cross_best_cos: list[float] = []
    halves: dict[str, list[tuple[float, float]]] = {"first": [], "second": []}  # (emptied, drop) at the default
    t1 = time.perf_counter()
    try:
        for n, ((ci, qa), qvec) in enumerate(zip(asked, qvecs, strict=True)):
            own, other = ing.keys[convs[ci].user], ing.keys[convs[(ci + 1) % len(convs)].user]
            opts = cfg.options(qa.question)
            hits = ing.search(own, opts, qvec)
            recall["none"].append(score([turn_ids(h.entry.provenance) for h in hits], [h.entry.text for h in hits],
                                        qa.evidence)["session_recall_any@5"])
            cross = ing.search(other, opts, qvec)
            for s, v in top_values(qa.question, hits).items():
                own_top[s].append(v)
            for s, v in top_values(qa.question, cross).items():
                cross_top[s].append(v)
            own_best.append(max((h.relevance or -1.0 for h in hits), default=-1.0))
            cross_best.append(max((h.relevance or -1.0 for h in cross), default=-1.0))
            own_best_cos.append(max((cosine_of(qa.question, h) for h in hits), default=-1.0))
            cross_best_cos.append(max((cosine_of(qa.question, h) for h in cross), default=-1.0))
            for f in FLOORS:
                floored = opts.model_copy(update={"similarity_threshold": f})
                fh = ing.search(own, floored, qvec)
                recall[f"{f:g}"].append(score([turn_ids(h.entry.provenance) for h in fh], [h.entry.text for h in fh],
                                              qa.evidence)["session_recall_any@5"])
                own_emptied[f"{f:g}"].append(float(not fh))
                emptied[f"{f:g}"].append(float(not ing.search(other, floored, qvec)))
            k = f"{DEFAULT_FLOOR:g}"
            halves["first" if ci < (len(convs) + 1) // 2 else "second"].append(
                (emptied[k][-1], recall["none"][-1] - recall[k][-1]))
            if n and n % 200 == 0:
                log(f"{n}/{len(asked)} questions, {time.perf_counter() - t1:.0f} s")
    finally:
        ing.close()
    separation: dict[str, dict[str, Any]] = {}
    for s in SIGNALS:
        pos, neg = np.asarray(own_top[s]), np.asarray(cross_top[s])
        separation[s] = {"auc": round(auc(pos, neg), 4), "ci95": auc_ci(pos, neg),
                         "own_median": round(float(np.median(pos)), 4), "cross_median": round(float(np.median(neg)), 4)}
    base = float(np.mean(recall["none"]))
    floors: dict[str, dict[str, Any]] = {}
    for f in FLOORS:
        k = f"{f:g}"
        diff = [a - b for a, b in zip(recall["none"], recall[k], strict=True)]
        floors[k] = {"cross_emptied": round(float(np.mean(emptied[k])), 4), "cross_emptied_ci95": share_ci(emptied[k]),
                     "own_emptied": round(float(np.mean(own_emptied[k])), 4),
                     "any@5": round(float(np.mean(recall[k])), 4), "any@5_ci95": share_ci(recall[k]),
                     "any@5_drop": round(base - float(np.mean(recall[k])), 4),
                     "any@5_drop_ci95": bootstrap_ci([{"d": d} for d in diff], ["d"], n=BOOT, seed=25)["d"]}
    d = floors[f"{DEFAULT_FLOOR:g}"]
    return {
        "questions": len(asked), "conversations": len(convs), "entries": ing.entries,
        "config": cfg.describe(), "default_floor": DEFAULT_FLOOR,
        "separation": separation,
        "any@5_no_floor": round(base, 4), "any@5_no_floor_ci95": share_ci(recall["none"]),
        "floors": floors,
        "gate": gate_of(recall["none"], own_best, cross_best),
        "gate_cosine": gate_of(recall["none"], own_best_cos, cross_best_cos),
        "halves": {h: {"questions": len(v), "cross_emptied": round(float(np.mean([e for e, _ in v])), 4),
                       "any@5_drop": round(float(np.mean([d for _, d in v])), 4)} for h, v in halves.items() if v},
        "targets": TARGETS,
        "met": {"auc": separation["relevance"]["auc"] >= TARGETS["auc"],
                "cross_emptied": d["cross_emptied"] >= TARGETS["cross_emptied"],
                "recall_drop": d["any@5_drop"] <= TARGETS["recall_drop"]},
        "own_top_relevance": [round(v, 4) for v in own_top["relevance"]],
        "cross_top_relevance": [round(v, 4) for v in cross_top["relevance"]],
        "seconds": {"ingest": round(ing.seconds, 1), "searches": round(time.perf_counter() - t1, 1),
                    "total": round(time.perf_counter() - t0, 1)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__name__, __doc__)
    p.add_argument("--data", type=Path, default=LOCOMO, help="a LoCoMo-format JSON file (default: LoCoMo-10)")
    p.add_argument("--limit", type=int, default=None, help="the first N conversations only (at least 2)")
    p.add_argument("--out", type=Path, default=RESULTS / "relevance.json", help="the JSON (.md, .png beside)")
    args = p.parse_args(argv)
    convs = load(args.data, limit=args.limit)
    if len(convs) < 2:
        p.error("--limit must leave at least 2 conversations (a question asks another one's user)")
    machine = machine_info()
    res = run(convs)
    res = {"machine": machine, "load_average_end": load_average(),
           "argv": " ".join(sys.argv[1:] if argv is None else argv), **res}
    write_json(args.out, res)
    md, png = write_reports(res, args.out)
    print(md.read_text())
    print(f"wrote {args.out}, {md}, {png}")
    return 0
