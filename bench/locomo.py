"""LoCoMo-format files → users, sessions and events (and the QA used to score retrieval).

LoCoMo-10 (``../shared/data/locomo/locomo10.json``) is CC BY-NC 4.0: evaluation use only.

Mapping (issue 5):

- each conversation (``sample_id``) is one user: ``user = sample_id`` (``conv-26``), app ``locomo``;
- speaker A (``conversation.speaker_a``) is the ``user`` role, speaker B (and any other name)
  the ``assistant`` role;
- every ``session_<n>`` is one session (id ``session_<n>``); event ids are the dia ids (``D3:5``),
  so entry provenance maps straight back to the evidence of the QA;
- event timestamps: the session's date-time (``"1:56 pm on 8 May, 2023"``) plus the turn's index
  in seconds (keeps the turns ordered and two equal turns of a session distinct); a session whose
  date-time does not parse gets the previous session's time plus one day (or 2000-01-01);
- ``captions=True`` appends a shared image's ``blip_caption`` to the turn text
  (``"... [shares a photo: a photo of a sunset]"``); off by default (the peers index text only).
  The ``query`` field of image turns (the dataset author's image search) is never used.

Evidence ids are parsed tolerantly (:func:`parse_evidence`): ``"D8:6; D9:17"`` and
``"D9:1 D4:4"`` give several ids, ``"D:11:26"`` gives ``D11:26``, ``"D"`` gives none.

:func:`to_records` writes the sessions in the backfill archive schema
(``{"app", "user", "session", "events": [{"id", "role", "content", "timestamp"}]}``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jobs.locomo import parse_dia_id, parse_dia_ids, parse_sample
from memcore.extraction.events import Event

__all__ = ["APP", "CATEGORIES", "QA", "Conversation", "Session", "convert", "load", "parse_evidence", "session_of"]

APP = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}



@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # normalised dia ids ("D3:5"), in order, unique

    @property
    def sessions(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s for e in self.evidence if (s := session_of(e)) is not None))


@dataclass
class Session:
    id: str  # "session_3"
    number: int
    time: datetime
    events: list[Event] = field(default_factory=list)


@dataclass
class Conversation:
    sample_id: str
    user: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[QA]

    @property
    def names(self) -> dict[str, str]:
        """Role → speaker name, for the verbatim extractor's ``"Speaker: text"`` lines."""
        return {"user": self.speaker_a, "assistant": self.speaker_b}

    @property
    def turns(self) -> int:
        return sum(len(s.events) for s in self.sessions)


def parse_evidence(values: Iterable[Any] | str | None) -> tuple[str, ...]:
    """Every dia id found in ``values`` as ``"D<s>:<t>"``, in order, without repeats."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    found = (f"D{s}:{t}" for v in values for s, t in parse_dia_ids(str(v)))
    return tuple(dict.fromkeys(found))


def session_of(turn_id: str) -> int | None:
    parsed = parse_dia_id(turn_id)
    return parsed[0] if parsed else None


def convert(sample: dict[str, Any], index: int = 0, *, captions: bool = False) -> Conversation:
    """One LoCoMo sample → a :class:`Conversation` (one user); the sessions as ``jobs.locomo`` parses them."""
    parsed = parse_sample(sample, index, captions=captions)
    sessions = [Session(id=s.key, number=s.number, time=s.time,
                        events=[Event(id=t.id, role=t.role, content=t.text, timestamp=t.timestamp)  # type: ignore[arg-type]
                                for t in s.turns])
                for s in parsed.sessions]
    questions = []
    for qa in sample.get("qa", []) or []:
        q = " ".join(str(qa.get("question", "")).split())
        if not q:
            continue
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(QA(q, str(answer), int(qa.get("category", 0) or 0), parse_evidence(qa.get("evidence"))))
    return Conversation(parsed.user, parsed.user, parsed.speaker_a, parsed.speaker_b, sessions, questions)


def load(path: str | Path, *, limit: int | None = None, captions: bool = False) -> list[Conversation]:
    """Every conversation of a LoCoMo-format JSON file (a list of samples), the first ``limit`` only if given."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = [data]
    samples = data[:limit] if limit else data
    return [convert(sample, i, captions=captions) for i, sample in enumerate(samples)]


def to_records(convs: Sequence[Conversation], app: str = APP) -> Iterator[dict[str, Any]]:
    """One archive row per session in the backfill schema (JSONL-ready: timestamps as ISO strings)."""
    for conv in convs:
        for s in conv.sessions:
            yield {
                "app": app,
                "user": conv.user,
                "session": s.id,
                "events": [
                    {"id": e.id, "role": e.role, "content": e.content, "timestamp": e.timestamp.isoformat()}
                    for e in s.events
                ],
            }


def write_jsonl(convs: Sequence[Conversation], path: str | Path, app: str = APP) -> int:
    """Writes :func:`to_records` as JSONL; returns the number of rows."""
    n = 0
    with Path(path).open("w") as fh:
        for row in to_records(convs, app):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
