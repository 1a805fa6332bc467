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
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memcore.extraction.events import Event

APP = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_FALLBACK_T0 = datetime(2000, 1, 1, tzinfo=UTC)


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


def parse_dia_id(text: str) -> tuple[int, int] | None:
    """``(session, turn)`` of the first dia id in ``text`` (tolerant), else None."""
    m = _DIA_ID.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_evidence(values: Iterable[Any] | str | None) -> tuple[str, ...]:
    """Every dia id found in ``values`` as ``"D<s>:<t>"``, in order, without repeats."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    found = (f"D{int(s)}:{int(t)}" for v in values for s, t in _DIA_ID.findall(str(v)))
    return tuple(dict.fromkeys(found))


def session_of(turn_id: str) -> int | None:
    parsed = parse_dia_id(turn_id)
    return parsed[0] if parsed else None


def parse_time(value: str) -> datetime | None:
    """LoCoMo session stamps such as ``"1:56 pm on 8 May, 2023"`` (UTC); None when unparsable."""
    text = " ".join(str(value).split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %d %B %Y", "%Y-%m-%d %H:%M"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _turn_text(turn: dict[str, Any], captions: bool) -> str:
    text = " ".join(str(turn.get("text", "")).split())
    caption = " ".join(str(turn.get("blip_caption", "") or "").split())
    if captions and caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def convert(sample: dict[str, Any], index: int = 0, *, captions: bool = False) -> Conversation:
    """One LoCoMo sample → a :class:`Conversation` (one user)."""
    conv = sample.get("conversation") or {}
    sample_id = str(sample.get("sample_id") or f"conv-{index}")
    speaker_a = str(conv.get("speaker_a") or "Speaker A").strip()
    speaker_b = str(conv.get("speaker_b") or "Speaker B").strip()
    numbers = sorted(int(m.group(1)) for k, v in conv.items() if (m := _SESSION_KEY.match(k)) and isinstance(v, list))
    sessions: list[Session] = []
    last: datetime | None = None
    for num in numbers:
        key = f"session_{num}"
        when = parse_time(str(conv.get(f"{key}_date_time", "")))
        if when is None:
            when = last + timedelta(days=1) if last is not None else _FALLBACK_T0
        last = when
        session = Session(id=key, number=num, time=when)
        seen: set[str] = set()
        for i, turn in enumerate(conv[key]):
            text = _turn_text(turn, captions)
            if not text:
                continue
            parsed = parse_dia_id(str(turn.get("dia_id", "")))
            event_id = f"D{parsed[0]}:{parsed[1]}" if parsed else f"D{num}:{i + 1}"
            if event_id in seen:
                event_id = f"{event_id}#{i}"
            seen.add(event_id)
            speaker = str(turn.get("speaker", "")).strip()
            role = "user" if speaker == speaker_a else "assistant"
            session.events.append(
                Event(id=event_id, role=role, content=text, timestamp=when + timedelta(seconds=i))
            )
        sessions.append(session)
    questions = []
    for qa in sample.get("qa", []) or []:
        q = " ".join(str(qa.get("question", "")).split())
        if not q:
            continue
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(QA(q, str(answer), int(qa.get("category", 0) or 0), parse_evidence(qa.get("evidence"))))
    return Conversation(sample_id, sample_id, speaker_a, speaker_b, sessions, questions)


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
