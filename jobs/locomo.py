"""LoCoMo-format files → backfill archive rows (``memctl backfill --locomo FILE --app APP``).

LoCoMo-10 is CC BY-NC 4.0: evaluation use only. The mapping is the one of issue 5; the benchmarks
read LoCoMo through :func:`parse_sample` too (``bench/harness/locomo.py``, which adds the QA):

- each conversation (``sample_id``, else ``conv-<index>``) is one user;
- speaker A is the ``user`` role, speaker B (and any other name) the ``assistant`` role; the
  row's ``names`` carry the two speaker names (the verbatim lines read ``"Caroline: ..."``);
- every ``session_<n>`` is one session ``session_<n>``; event ids are the dia ids (``D3:5``,
  parsed tolerantly; a missing one becomes ``D<n>:<i+1>``, a repeated one gets ``#<i>``);
- timestamps: the session's date-time (``"1:56 pm on 8 May, 2023"``, UTC) plus the turn's
  index in seconds; an unparsable one is the previous session's plus one day (or 2000-01-01).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_FALLBACK_T0 = datetime(2000, 1, 1, tzinfo=UTC)
_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %d %B %Y", "%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class Turn:
    id: str  # the dia id, "D3:5"
    role: str  # "user" (speaker A) or "assistant"
    text: str
    timestamp: datetime


@dataclass(frozen=True)
class Session:
    number: int
    key: str  # "session_3"
    time: datetime
    turns: list[Turn]


@dataclass(frozen=True)
class Sample:
    """One LoCoMo conversation: one user, the two speakers, the sessions in order."""

    user: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]


def parse_time(value: str) -> datetime | None:
    """LoCoMo session stamps such as ``"1:56 pm on 8 May, 2023"`` (UTC); None when unparsable."""
    text = " ".join(str(value).split())
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def parse_dia_id(text: str) -> tuple[int, int] | None:
    """``(session, turn)`` of the first dia id in ``text`` (tolerant: ``D3:5``, ``d 3 : 5``), else None."""
    found = parse_dia_ids(text)
    return found[0] if found else None


def parse_dia_ids(text: str) -> list[tuple[int, int]]:
    """``(session, turn)`` of every dia id in ``text``, in order (QA evidence may hold several)."""
    return [(int(s), int(t)) for s, t in _DIA_ID.findall(text)]


def turn_text(turn: dict[str, Any], captions: bool = False) -> str:
    """The turn's text, whitespace-normalised; with ``captions`` the shared photo's caption appended."""
    text = " ".join(str(turn.get("text", "")).split())
    caption = " ".join(str(turn.get("blip_caption", "") or "").split())
    if captions and caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def parse_sample(sample: dict[str, Any], index: int = 0, *, captions: bool = False) -> Sample:
    """One LoCoMo sample with the mapping of this module's docstring (empty turns dropped)."""
    conv = sample.get("conversation") or {}
    user = str(sample.get("sample_id") or f"conv-{index}")
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
        turns: list[Turn] = []
        seen: set[str] = set()
        for i, turn in enumerate(conv[key]):
            text = turn_text(turn, captions)
            if not text:
                continue
            parsed = parse_dia_id(str(turn.get("dia_id", "")))
            turn_id = f"D{parsed[0]}:{parsed[1]}" if parsed else f"D{num}:{i + 1}"
            if turn_id in seen:
                turn_id = f"{turn_id}#{i}"
            seen.add(turn_id)
            role = "user" if str(turn.get("speaker", "")).strip() == speaker_a else "assistant"
            turns.append(Turn(turn_id, role, text, when + timedelta(seconds=i)))
        sessions.append(Session(num, key, when, turns))
    return Sample(user, speaker_a, speaker_b, sessions)


def sample_rows(sample: dict[str, Any], index: int, app: str) -> Iterator[dict[str, Any]]:
    """The archive rows (one per session with turns) of one LoCoMo sample."""
    parsed = parse_sample(sample, index)
    names = {"user": parsed.speaker_a, "assistant": parsed.speaker_b}
    for session in parsed.sessions:
        if session.turns:
            events = [{"id": t.id, "role": t.role, "content": t.text, "timestamp": t.timestamp.isoformat()}
                      for t in session.turns]
            yield {"app": app, "user": parsed.user, "session": session.key, "names": names, "events": events}


def rows(path: str | Path, app: str = "locomo", *, limit: int | None = None) -> list[dict[str, Any]]:
    """Every session of a LoCoMo-format JSON file (a list of samples, or one sample) as archive rows."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ValueError(f"{path}: a LoCoMo file holds a list of samples")
    samples = data[:limit] if limit else data
    return [row for i, sample in enumerate(samples) for row in sample_rows(sample, i, app)]


def write_jsonl(path: str | Path, out: str | Path, app: str = "locomo", *, limit: int | None = None) -> int:
    """Convert a LoCoMo file into a JSONL archive; returns the number of rows."""
    converted = rows(path, app, limit=limit)
    with Path(out).open("w", encoding="utf-8") as fh:
        for row in converted:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(converted)
