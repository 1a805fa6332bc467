"""The verbatim extractor: deterministic, no model. Stores conversation turns as episodes.

Granularity:

- ``turn``: one entry per user/assistant message;
- ``round``: one entry per user message plus the assistant message(s) that follow it
  (assistant messages before the first user message form a round of their own);
- ``session``: the whole delta as one entry;
- ``window``: one entry per message holding it and ``window`` messages on each side (within the
  delta, so a session extracted whole gives every turn its neighbours). Windows overlap; search
  merges the windows of a result that share turns (:func:`memcore.fusion.merge_overlapping`).
  Measured on LoCoMo (``bench/results/retrieval.md``) it is the best of the four: a turn alone
  often lacks the question's words, which its neighbours carry. Two identical windows (a
  session shorter than the window) are one entry (same content, same id).

Each entry is an ``episode`` whose text is ``"Speaker: content"`` lines (``User`` /
``Assistant``, or the names passed in ``names``), whose ``event_time`` is the timestamp of its
(first) event, whose ``provenance`` is the ids of the events it holds and whose ``source`` is
``user`` when a user message is part of it, else ``assistant``. Text longer than
:data:`memcore.fields.MAX_TEXT_BYTES` is split into several entries (at message boundaries
first, then at whitespace), each with the provenance of the messages it holds.

Apply its operations with the ``append_only`` policy: turns are kept verbatim, only exact
duplicates (a resent turn: same text and time, so the same id) are dropped; reconcile would
merge short look-alike turns ("User: yes").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from memcore.extraction.events import Event, ExtractionResult
from memcore.fields import MAX_TEXT_BYTES
from memcore.model import Entry, Kind, Memory, Operation, Source
from memcore.vocabulary import DEFAULT_NAMES, GRANULARITIES, Granularity, PolicyName

MAX_WINDOW = 16


def _nbytes(s: str) -> int:
    return len(s.encode("utf-8"))


def split_text(text: str, max_bytes: int) -> list[str]:
    """Split ``text`` into pieces of at most ``max_bytes`` UTF-8 bytes, at whitespace when possible."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4")
    pieces: list[str] = []
    cur = ""
    for part in re.split(r"(\s+)", text):
        if not part:
            continue
        if _nbytes(cur) + _nbytes(part) <= max_bytes:
            cur += part
            continue
        if cur.strip():
            pieces.append(cur.strip())
        cur = "" if part.isspace() else part
        while _nbytes(cur) > max_bytes:  # one word longer than the limit: cut at characters
            cut = len(cur.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"))
            pieces.append(cur[:cut])
            cur = cur[cut:]
    if cur.strip():
        pieces.append(cur.strip())
    return pieces


class VerbatimExtractor:
    """Stores the delta verbatim as episode entries; ignores existing entries."""

    default_policy: PolicyName = "append_only"
    """Turns are kept as they are: no reconcile merging of distinct turns."""
    uses_existing = False
    max_events: int | None = None

    def __init__(
        self,
        granularity: Granularity = "turn",
        names: Mapping[str, str] | None = None,
        *,
        max_bytes: int = MAX_TEXT_BYTES,
        window: int = 1,
    ) -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
        if not 0 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be within 0..{MAX_WINDOW}, got {window}")
        self.granularity: Granularity = granularity
        self.window = window
        self.names = {**DEFAULT_NAMES, **(names or {})}
        self.max_bytes = min(max_bytes, MAX_TEXT_BYTES)

    def extract(
        self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None
    ) -> ExtractionResult:
        ops: list[Operation] = []
        for group in self.groups(delta):
            for text, events in self._pack(group):
                mem = Memory(
                    text=text,
                    kind=Kind.EPISODE,
                    event_time=events[0].timestamp,
                    source=Source.USER if any(e.role == "user" for e in events) else Source.ASSISTANT,
                    provenance=list(dict.fromkeys(e.id for e in events)),
                )
                ops.append(Operation(type="add", memory=mem))
        return ExtractionResult(operations=ops)

    def groups(self, delta: Sequence[Event]) -> list[list[Event]]:
        """The delta's text events grouped by the granularity."""
        events = [e for e in delta if e.is_text]
        if self.granularity == "turn":
            return [[e] for e in events]
        if self.granularity == "session":
            return [events] if events else []
        if self.granularity == "window":
            w = self.window
            return [events[max(0, i - w) : i + w + 1] for i in range(len(events))]
        rounds: list[list[Event]] = []
        for e in events:
            if e.role == "user" or not rounds:
                rounds.append([e])
            else:
                rounds[-1].append(e)
        return rounds

    def line(self, event: Event) -> str:
        return f"{self.names.get(event.role, event.role.capitalize())}: {event.text}"

    def _pack(self, group: Sequence[Event]) -> list[tuple[str, list[Event]]]:
        """Lines of ``group`` packed into texts of at most ``max_bytes``, each with its events."""
        lines: list[tuple[str, Event]] = []
        for e in group:
            line = self.line(e)
            if _nbytes(line) <= self.max_bytes:
                lines.append((line, e))
                continue
            prefix = line[: len(line) - len(e.text)]
            for piece in split_text(e.text, self.max_bytes - _nbytes(prefix)):
                lines.append((prefix + piece, e))
        out: list[tuple[str, list[Event]]] = []
        text = ""
        events: list[Event] = []
        for line, e in lines:
            joined = f"{text}\n{line}" if text else line
            if text and _nbytes(joined) > self.max_bytes:
                out.append((text, events))
                joined, events = line, []
            text = joined
            if not events or events[-1] is not e:
                events.append(e)
        if text:
            out.append((text, events))
        return out
