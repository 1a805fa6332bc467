"""Reconcile: stop paraphrased duplicates of an ``add`` before they reach the store (seed 004, 2.4).

Each add is compared with at most :data:`MAX_CANDIDATES` similar entries on two independent
signals, joined by OR: the cosine score of the vector search and the word-set Jaccard overlap.

==========  =====================================  =========================================
tier        condition                              decision
==========  =====================================  =========================================
skip        score >= 0.90 or Jaccard >= 0.70       drop the add (a duplicate)
update      score >= 0.60 or Jaccard >= 0.40       update that candidate (if update enabled)
none        otherwise                              keep the add
==========  =====================================  =========================================

The best candidate is the one with the highest tier, then the highest score, then Jaccard,
then id: the tier is compared before the score, so a clear duplicate is never displaced by a
merely related entry with a slightly higher score. A failed candidate search keeps the
original operation (see :func:`search_candidates`, which returns None then).

Scores must be cosine-comparable: hybrid search returns RRF values (about 0.016), so the
candidates are searched dense-only with no threshold (:func:`candidate_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memcore.errors import MemoryServiceError
from memcore.model import Entry, Memory, Operation, UserKey
from memcore.search_model import SearchHit, SearchOptions
from memcore.service import MemoryService
from memcore.text import jaccard

SKIP_SCORE = 0.90
SKIP_JACCARD = 0.70
UPDATE_SCORE = 0.60
UPDATE_JACCARD = 0.40
MAX_CANDIDATES = 3

TIER_NONE, TIER_UPDATE, TIER_SKIP = 0, 1, 2


def tier(score: float, jac: float) -> int:
    """The decision tier of one candidate (the high tier first, so skip wins over update)."""
    if score >= SKIP_SCORE or jac >= SKIP_JACCARD:
        return TIER_SKIP
    if score >= UPDATE_SCORE or jac >= UPDATE_JACCARD:
        return TIER_UPDATE
    return TIER_NONE


@dataclass(frozen=True)
class Decision:
    """``keep`` the original operation, ``skip`` it (duplicate of ``target``) or ``update`` ``target``."""

    action: Literal["keep", "skip", "update"]
    target: Entry | None = None
    score: float = 0.0
    jaccard: float = 0.0
    tier: int = TIER_NONE
    reason: str = ""


def candidate_options(text: str) -> SearchOptions:
    """Dense-only search (cosine scores), no threshold, at most :data:`MAX_CANDIDATES` hits."""
    return SearchOptions(query=text, hybrid=False, similarity_threshold=-1.0, max_results=MAX_CANDIDATES,
                         kind_fallback=False)


def search_candidates(service: MemoryService, key: UserKey, memory: Memory) -> list[SearchHit] | None:
    """The reconcile candidates of ``memory``; None when the search failed (keep the op then)."""
    try:
        return service.search(key, candidate_options(memory.text))
    except MemoryServiceError:
        return None


def reconcile(op: Operation, candidates: Sequence[SearchHit], *, update_enabled: bool = True) -> Decision:
    """Decide what happens to ``op`` given its candidates (only ``add`` is reconciled)."""
    if op.type != "add" or op.memory is None or not candidates:
        return Decision("keep", reason="nothing to reconcile")
    text = op.memory.text
    best: tuple[int, float, float, str] | None = None
    best_hit: SearchHit | None = None
    for hit in list(candidates)[:MAX_CANDIDATES]:
        jac = jaccard(text, hit.entry.text)
        rank = (tier(hit.score, jac), hit.score, jac, hit.entry.id)
        if best is None or rank[:3] > best[:3] or (rank[:3] == best[:3] and rank[3] < best[3]):
            best, best_hit = rank, hit
    assert best is not None and best_hit is not None
    t, score, jac, _ = best
    detail = f"score {score:.3f}, jaccard {jac:.3f}"
    if t == TIER_SKIP:
        return Decision("skip", best_hit.entry, score, jac, t, f"duplicate of {best_hit.entry.id} ({detail})")
    if t == TIER_UPDATE and update_enabled:
        return Decision("update", best_hit.entry, score, jac, t, f"similar to {best_hit.entry.id} ({detail})")
    if t == TIER_UPDATE:
        return Decision("keep", best_hit.entry, score, jac, t, f"similar to {best_hit.entry.id} ({detail}) "
                                                               "but update is disabled; kept the add")
    return Decision("keep", best_hit.entry, score, jac, t, f"no similar entry ({detail})")
