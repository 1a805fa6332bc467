"""Pure ranking helpers shared by every backend: RRF, dedup, kind fallback, event-time order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memcore.model import Kind, SearchHit
from memcore.text import word_set

DEDUP_JACCARD = 0.80
KIND_FALLBACK_MIN = 3
RRF_K = 60


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: each list adds 1/(k + rank + 1) (rank from 0) per id.

    Pure: the same input gives the same output; ties are broken by id (ascending).
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, item in enumerate(ranking):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def deduplicate(hits: Sequence[SearchHit], threshold: float = DEDUP_JACCARD) -> list[SearchHit]:
    """Drop near-identical hits (word-set Jaccard >= threshold), keeping the higher score.

    The result keeps the input order of the survivors.
    """
    order = sorted(range(len(hits)), key=lambda i: (-hits[i].score, hits[i].entry.id))
    kept: list[int] = []
    kept_sets: list[frozenset[str]] = []
    for i in order:
        ws = word_set(hits[i].entry.text)
        if any(_jaccard(ws, other) >= threshold for other in kept_sets):
            continue
        kept.append(i)
        kept_sets.append(ws)
    keep = set(kept)
    return [h for i, h in enumerate(hits) if i in keep]


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def merge_kind_fallback(primary: Sequence[SearchHit], fallback: Sequence[SearchHit], kind: Kind) -> list[SearchHit]:
    """Requested-kind hits first (primary, then fallback hits of that kind), then the rest by score."""
    seen: set[str] = set()
    head: list[SearchHit] = []
    tail: list[SearchHit] = []
    for hit in list(primary) + list(fallback):
        if hit.entry.id in seen:
            continue
        seen.add(hit.entry.id)
        (head if hit.entry.kind == kind else tail).append(hit)
    head.sort(key=lambda h: (-h.score, h.entry.id))
    tail.sort(key=lambda h: (-h.score, h.entry.id))
    return head + tail


def order_by_event_time(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """Oldest event first; entries without an event time go last, by score."""
    far = datetime.max.replace(tzinfo=None)

    def key(h: SearchHit) -> tuple[int, datetime, float, str]:
        et = h.entry.event_time
        return (0 if et else 1, et.replace(tzinfo=None) if et else far, -h.score, h.entry.id)

    return sorted(hits, key=key)
