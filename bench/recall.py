"""Recall scoring for the LoCoMo retrieval benchmark (pure functions, no engines).

How recall is scored (ARCHITECTURE.md, so numbers compare with the peers measured on the same
file): one search per question with the question text only, top 10 results; each result maps to
the turn ids in its provenance (the event ids of its refs, :func:`turn_ids`: LoCoMo's dia ids are
unique within a conversation); sessions are ranked by first appearance among those results.

- ``session_recall_any@k``: an evidence session is among the first k ranked sessions;
- ``session_recall_all@k``: all evidence sessions are among the first k ranked sessions;
- ``turn_recall_any@k`` / ``turn_recall_all@k``: one / every evidence turn is in the provenance
  of the first k results;
- ``ndcg@10``: turn-level relevance: every evidence turn is one relevant item; result i gains the
  number of evidence turns its provenance holds that no earlier result held (a second copy of a
  turn earns nothing), discounted by log2(i + 2); the ideal DCG is one evidence turn at each of
  the first min(|evidence|, 10) ranks; the ratio is capped at 1 (a result may hold several);
- ``tokens@10``: whitespace tokens of the (up to) 10 result texts together.

Questions without a parsable evidence id are not scored. Categories 1-4 make ``overall``;
category 5 (adversarial) is reported on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.locomo import session_of
from memcore.provenance import parse_event_ref

KS = (1, 5, 10)
MAIN_CATEGORIES = (1, 2, 3, 4)
HEADLINE = ("session_recall_any@5", "session_recall_all@5", "turn_recall_all@10", "ndcg@10")


@dataclass(frozen=True)
class Scored:
    category: int
    metrics: dict[str, float]


def turn_ids(provenances: Sequence[Sequence[str]]) -> list[list[str]]:
    """The event ids that the results' provenance refs (``<session>/<event_id>``, or bare ids) name."""
    return [[parse_event_ref(t).event_id for t in prov] for prov in provenances]


def ranked_sessions(provenances: Sequence[Sequence[str]]) -> list[int]:
    """Sessions in order of first appearance among the results' provenance."""
    out: dict[int, None] = {}
    for prov in provenances:
        for turn in prov:
            s = session_of(turn)
            if s is not None:
                out.setdefault(s, None)
    return list(out)


def ndcg(provenances: Sequence[Sequence[str]], evidence: Iterable[str], k: int = 10) -> float:
    ev = set(evidence)
    if not ev:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for rank, prov in enumerate(provenances[:k]):
        new = (set(prov) & ev) - seen
        if new:
            dcg += len(new) / math.log2(rank + 2)
            seen |= new
    ideal = sum(1.0 / math.log2(r + 2) for r in range(min(len(ev), k)))
    return min(1.0, dcg / ideal)


def score(
    provenances: Sequence[Sequence[str]], texts: Sequence[str], evidence: Sequence[str], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Every metric of one question from its ranked results (provenance and text of each)."""
    provenances = turn_ids(provenances)
    ev_turns = set(evidence)
    ev_sessions = {s for e in evidence if (s := session_of(e)) is not None}
    sessions = ranked_sessions(provenances)
    out: dict[str, float] = {}
    for k in ks:
        top = set(sessions[:k])
        covered = {t for prov in provenances[:k] for t in prov}
        out[f"session_recall_any@{k}"] = float(bool(ev_sessions & top))
        out[f"session_recall_all@{k}"] = float(ev_sessions <= top)
        out[f"turn_recall_any@{k}"] = float(bool(ev_turns & covered))
        out[f"turn_recall_all@{k}"] = float(ev_turns <= covered)
    out["ndcg@10"] = ndcg(provenances, evidence, 10)
    out["tokens@10"] = float(sum(len(t.split()) for t in texts[:10]))
    out["results"] = float(len(provenances[:10]))
    return out


def mean_metrics(rows: Sequence[dict[str, float]], digits: int = 4) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    keys = list(rows[0])
    out: dict[str, float] = {"n": len(rows)}
    for key in keys:
        out[key] = round(sum(r[key] for r in rows) / len(rows), digits if key != "tokens@10" else 1)
    return out


def aggregate(scored: Sequence[Scored]) -> dict[str, object]:
    """``overall`` (categories 1-4), ``by_category`` ("1".."5") and ``adversarial`` (category 5)."""
    main = [s.metrics for s in scored if s.category in MAIN_CATEGORIES]
    by_cat = {
        str(c): mean_metrics([s.metrics for s in scored if s.category == c])
        for c in sorted({s.category for s in scored})
    }
    return {
        "overall": mean_metrics(main),
        "by_category": by_cat,
        "adversarial": by_cat.get("5", {"n": 0}),
    }


# ----------------------------------------------------------------------------- token budgets
BUDGETS = (250, 500, 1000)
"""Token budgets (``max_tokens``, whitespace count) the benchmark also searches within."""
BUDGET_RESULTS = 50
"""``max_results`` of a budgeted search: the budget, not the count, decides what is returned."""


def budget_score(provenances: Sequence[Sequence[str]], texts: Sequence[str], evidence: Sequence[str],
                 budget: int) -> dict[str, float]:
    """Session any / turn all over everything a ``max_tokens=budget`` search returned (the same rules as
    the @k metrics, with k = all that fit), and the tokens it used."""
    provenances = turn_ids(provenances)
    ev_turns = set(evidence)
    ev_sessions = {s for e in evidence if (s := session_of(e)) is not None}
    covered = {t for prov in provenances for t in prov}
    return {
        f"session_recall_any@{budget}tok": float(bool(ev_sessions & set(ranked_sessions(provenances)))),
        f"turn_recall_all@{budget}tok": float(ev_turns <= covered),
        f"tokens@{budget}tok": float(sum(len(t.split()) for t in texts)),
    }


def bootstrap_ci(rows: Sequence[dict[str, float]], keys: Sequence[str], n: int = 2000, seed: int = 16,
                 ) -> dict[str, list[float]]:
    """Percentile bootstrap 95 % interval of the mean of each key, resampling questions with replacement."""
    import numpy as np

    if not rows:
        return {}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(rows), size=(n, len(rows)))
    out: dict[str, list[float]] = {}
    for key in keys:
        values = np.asarray([r[key] for r in rows], dtype=np.float64)
        means = values[idx].mean(axis=1)
        out[key] = [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]
    return out
