"""Query-time result shaping experiments: what the 10 returned results are made of.

- ``hits``: the engine's hits as they are (entry text and provenance);
- ``spans``: each hit becomes the span of turns it covers plus ``before``/``after`` neighbouring turns
  of its session (read from the raw-turn archive); overlapping or adjacent spans of a session are
  merged into one result, and hits are consumed until 10 results exist;
- ``sessions``: sessions ranked by fusing (RRF, k = 10) their first appearance among the hits with,
  optionally, a session-level BM25 ranking; each result is the whole session.

:class:`Archive` plays the event archive's role (the service keeps raw turns for session recall):
the turns of every session in order, each as its ``"Speaker: text"`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.locomo import Conversation, session_of
from memcore.provenance import parse_event_ref
from memcore.search_model import SearchHit

SESSION_RRF_K = 10


@dataclass(frozen=True)
class Post:
    """Result shaping (defaults: the engine's top 10 hits as they are)."""

    shape: str = "hits"  # hits | spans | sessions
    candidates: int = 0  # hits asked of the engine (0: 10)
    before: int = 0
    after: int = 0
    session_index: bool = False  # sessions: also rank sessions with a session-level BM25 index


@dataclass(frozen=True)
class Result:
    text: str
    provenance: tuple[str, ...]


class Archive:
    """Raw turns by user and session number: ids in order, positions and ``"Speaker: text"`` lines."""

    def __init__(self, convs: Sequence[Conversation]) -> None:
        self.ids: dict[tuple[str, int], list[str]] = {}
        self.pos: dict[tuple[str, str], tuple[int, int]] = {}
        self.line: dict[tuple[str, str], str] = {}
        for conv in convs:
            for s in conv.sessions:
                self.ids[(conv.user, s.number)] = [e.id for e in s.events]
                for p, e in enumerate(s.events):
                    self.pos[(conv.user, e.id)] = (s.number, p)
                    self.line[(conv.user, e.id)] = f"{conv.names[e.role]}: {e.content}"

    def result(self, user: str, session: int, lo: int, hi: int) -> Result:
        ids = tuple(self.ids[(user, session)][lo : hi + 1])
        return Result("\n".join(self.line[(user, t)] for t in ids), ids)

    def session(self, user: str, session: int) -> Result:
        return self.result(user, session, 0, len(self.ids[(user, session)]) - 1)


def spans(hits: Sequence[SearchHit], user: str, archive: Archive, before: int, after: int, k: int = 10) -> list[Result]:
    """Hits → neighbour-expanded turn spans, merged per session, at most ``k``."""
    out: list[list[int]] = []  # [session, lo, hi]
    for hit in hits:
        turns = [parse_event_ref(t).event_id for t in hit.entry.provenance]
        where = [archive.pos[(user, t)] for t in turns if (user, t) in archive.pos]
        if not where:
            continue
        session = where[0][0]
        n = len(archive.ids[(user, session)])
        lo = max(0, min(p for s, p in where if s == session) - before)
        hi = min(n - 1, max(p for s, p in where if s == session) + after)
        for span in out:
            if span[0] == session and lo <= span[2] + 1 and hi >= span[1] - 1:
                span[1], span[2] = min(span[1], lo), max(span[2], hi)
                break
        else:
            out.append([session, lo, hi])
            if len(out) >= k:
                break
    return [archive.result(user, s, lo, hi) for s, lo, hi in out]


def session_ranking(hits: Sequence[SearchHit], session_hits: Sequence[SearchHit] | None) -> list[int]:
    """Sessions by RRF of their first appearance among ``hits`` and (if given) a session-level ranking."""
    lists = [_sessions_of(hits)]
    if session_hits is not None:
        lists.append(_sessions_of(session_hits))
    scores: dict[int, float] = {}
    for ranking in lists:
        for rank, s in enumerate(ranking):
            scores[s] = scores.get(s, 0.0) + 1.0 / (SESSION_RRF_K + rank + 1)
    return sorted(scores, key=lambda s: (-scores[s], s))


def _sessions_of(hits: Sequence[SearchHit]) -> list[int]:
    out: dict[int, None] = {}
    for hit in hits:
        for t in hit.entry.provenance:
            s = session_of(parse_event_ref(t).event_id)
            if s is not None:
                out.setdefault(s, None)
    return list(out)


def shape(
    hits: Sequence[SearchHit], post: Post, user: str, archive: Archive,
    session_hits: Sequence[SearchHit] | None = None, k: int = 10,
) -> list[Result]:
    if post.shape == "spans":
        return spans(hits, user, archive, post.before, post.after, k)
    if post.shape == "sessions":
        ranked = [s for s in session_ranking(hits, session_hits) if (user, s) in archive.ids]
        return [archive.session(user, s) for s in ranked[:k]]
    return [Result(h.entry.text, tuple(h.entry.provenance)) for h in hits[:k]]
