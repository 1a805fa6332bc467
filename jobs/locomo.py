"""LoCoMo-format files → backfill archive rows (``memctl backfill --locomo FILE --app APP``).

LoCoMo-10 is CC BY-NC 4.0: evaluation use only. The mapping is the one of issue 5 and of
``bench/locomo.py`` (which also parses the QA; the two must agree, a test checks it):

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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_FALLBACK_T0 = datetime(2000, 1, 1, tzinfo=UTC)
_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %d %B %Y", "%Y-%m-%d %H:%M")


def parse_time(value: str) -> datetime | None:
    text = " ".join(str(value).split())
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def sample_rows(sample: dict[str, Any], index: int, app: str) -> Iterator[dict[str, Any]]:
    """The archive rows (one per session) of one LoCoMo sample."""
    conv = sample.get("conversation") or {}
    user = str(sample.get("sample_id") or f"conv-{index}")
    speaker_a = str(conv.get("speaker_a") or "Speaker A").strip()
    speaker_b = str(conv.get("speaker_b") or "Speaker B").strip()
    numbers = sorted(int(m.group(1)) for k, v in conv.items() if (m := _SESSION_KEY.match(k)) and isinstance(v, list))
    last: datetime | None = None
    for num in numbers:
        key = f"session_{num}"
        when = parse_time(str(conv.get(f"{key}_date_time", "")))
        if when is None:
            when = last + timedelta(days=1) if last is not None else _FALLBACK_T0
        last = when
        events: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, turn in enumerate(conv[key]):
            text = " ".join(str(turn.get("text", "")).split())
            if not text:
                continue
            m = _DIA_ID.search(str(turn.get("dia_id", "")))
            event_id = f"D{int(m.group(1))}:{int(m.group(2))}" if m else f"D{num}:{i + 1}"
            if event_id in seen:
                event_id = f"{event_id}#{i}"
            seen.add(event_id)
            role = "user" if str(turn.get("speaker", "")).strip() == speaker_a else "assistant"
            events.append({"id": event_id, "role": role, "content": text,
                           "timestamp": (when + timedelta(seconds=i)).isoformat()})
        if events:
            yield {"app": app, "user": user, "session": key, "names": {"user": speaker_a, "assistant": speaker_b},
                   "events": events}


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
