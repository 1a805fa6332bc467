"""Pure ranking helpers shared by every backend: RRF, dedup, merging overlapping verbatim windows,
kind fallback, event-time order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memcore.fields import MAX_TEXT_BYTES
from memcore.model import Entry, Kind
from memcore.search_model import SearchHit
from memcore.text import word_set

DEDUP_JACCARD = 0.80
KIND_FALLBACK_MIN = 3
RRF_K = 60


def rrf(
    rankings: Sequence[Sequence[str]], k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: list i adds weights[i]/(k + rank + 1) (rank from 0) per id.

    Without ``weights`` every list weighs 1 (plain RRF). Pure: the same input gives the same
    output; ties are broken by id (ascending); an id repeated within a list counts once (its best rank).
    """
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking is required")
    scores: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[i]
        seen: set[str] = set()
        for rank, item in enumerate(ranking):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank + 1)
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


def merge_overlapping(hits: Sequence[SearchHit], limit: int, scan: int | None = None) -> list[SearchHit]:
    """Merge verbatim episodes that share turns (overlapping windows) into one hit each; at most ``limit``.

    A hit is mergeable when it is an episode whose text is one line per provenance id (what the
    verbatim extractor writes). Hits are taken best first (at most ``scan`` of them); one that
    shares a turn with an earlier group, and has the same line for every shared turn, joins that
    group; anything else starts a group. A group's hit keeps the best entry's id and score; its
    text and provenance are the union of its entries' lines and turns (ordered by each entry's
    event time), its event time the earliest, and ``merged`` lists the other entries' ids.
    A merge that would exceed the text limit is not made. Pure.
    """
    groups: list[_Group] = []
    for hit in hits[: scan if scan is not None else len(hits)]:
        lines = _lines(hit.entry)
        if lines is not None:
            target = next((g for g in groups if g.accepts(lines)), None)
            if target is not None:
                target.add(hit, lines)
                continue
        groups.append(_Group(hit, lines))
        if len(groups) >= limit:
            break
    return [g.hit() for g in groups]


def turn_lines(entry: Entry) -> list[tuple[str, str]] | None:
    """(turn id, line) pairs of a verbatim episode (one line per distinct provenance id), else None."""
    lines = entry.text.split("\n")
    if entry.kind != Kind.EPISODE or not entry.provenance or len(lines) != len(entry.provenance):
        return None
    if len(set(entry.provenance)) != len(entry.provenance):
        return None
    return list(zip(entry.provenance, lines, strict=True))


def _lines(entry: Entry) -> dict[str, str] | None:
    """Turn id → its line, when ``entry`` is a verbatim episode."""
    pairs = turn_lines(entry)
    return dict(pairs) if pairs is not None else None


class _Group:
    def __init__(self, first: SearchHit, lines: dict[str, str] | None) -> None:
        self.first = first
        self.lines = dict(lines) if lines is not None else None
        self.parts: list[tuple[Entry, dict[str, str]]] = [(first.entry, lines)] if lines is not None else []

    def accepts(self, lines: dict[str, str]) -> bool:
        if self.lines is None:
            return False
        shared = lines.keys() & self.lines.keys()
        if not shared or any(lines[t] != self.lines[t] for t in shared):
            return False
        extra = sum(len(lines[t].encode("utf-8")) + 1 for t in lines.keys() - shared)
        return len(self._text().encode("utf-8")) + extra <= MAX_TEXT_BYTES

    def add(self, hit: SearchHit, lines: dict[str, str]) -> None:
        assert self.lines is not None
        self.lines.update(lines)
        self.parts.append((hit.entry, lines))

    def _ordered(self) -> list[tuple[str, str]]:
        far = datetime.max.replace(tzinfo=None)
        parts = sorted(self.parts, key=lambda p: (p[0].event_time.replace(tzinfo=None) if p[0].event_time
                                                  else far, p[0].id))
        out: dict[str, str] = {}
        for _, lines in parts:
            for turn, line in lines.items():
                out.setdefault(turn, line)
        return list(out.items())

    def _text(self) -> str:
        return "\n".join(line for _, line in self._ordered())

    def hit(self) -> SearchHit:
        if len(self.parts) < 2:
            return self.first
        ordered = self._ordered()
        times = [e.event_time for e, _ in self.parts if e.event_time is not None]
        entry = self.first.entry.model_copy(update={
            "text": "\n".join(line for _, line in ordered),
            "provenance": [turn for turn, _ in ordered],
            "event_time": min(times) if times else None,
        })
        merged = [e.id for e, _ in self.parts[1:]]
        return self.first.model_copy(update={"entry": entry, "merged": merged})


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
