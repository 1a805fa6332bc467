"""The backfill archive schema: one JSON object per session (see docs/archive-format.md).

::

    {"app": "support", "user": "u-42", "session": "2024-03-01-a",
     "names": {"user": "Ann", "assistant": "Bot"},            # optional: speaker names for the lines
     "events": [{"id": "e1", "role": "user", "content": "...", "timestamp": "2024-03-01T10:00:00Z",
                 "tool_calls": [...], "tool_call_id": "...", "external_context": false}, ...]}

A row is valid as a whole or rejected as a whole (:class:`RowError` says why, naming the
field): app, user and session id by the one identifier rule of :mod:`memcore.model` (as the
HTTP API and session ingest accept them), speaker names of at most ``MAX_NAME_CHARS``,
1..2,000 events with unique ids, each a :class:`memcore.extraction.events.Event` (role user|assistant|tool,
ISO-8601 timestamp — naive means UTC — or epoch seconds). Null optional
fields are treated as absent (Parquet writes them), ``tool_calls`` may be a JSON string.
Unknown keys are rejected, so a typo is reported instead of silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memcore.errors import MemoryServiceError
from memcore.extraction.events import Event, parse_events
from memcore.fields import MAX_NAME_CHARS
from memcore.model import UserKey
from memcore.validation import check_session, make_key

ROW_KEYS = frozenset({"app", "user", "session", "events", "names"})
NAME_ROLES = frozenset({"user", "assistant"})


class RowError(ValueError):
    """An archive row that cannot be backfilled; ``field`` names the offending part."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclass(frozen=True)
class SessionRow:
    key: UserKey
    session: str
    events: list[Event]
    names: dict[str, str] | None = None

    @property
    def first_ts(self) -> float:
        """The time of the earliest event (sessions of a user are written in this order)."""
        return min((e.timestamp for e in self.events), default=datetime(1970, 1, 1, tzinfo=UTC)).timestamp()

    @property
    def turns(self) -> int:
        """User/assistant messages with text (what extraction and the archive keep)."""
        return sum(e.is_text for e in self.events)

    def events_json(self) -> str:
        return json.dumps([e.model_dump(mode="json", exclude_defaults=True) for e in self.events], ensure_ascii=False)


def parse_row(raw: Any) -> SessionRow:
    """Validate one archive row (a dict, or a JSON text); raises :class:`RowError`."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RowError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(raw, Mapping):
        raise RowError("a row must be a JSON object")
    unknown = sorted(str(k) for k in raw if k not in ROW_KEYS)
    if unknown:
        raise RowError(f"unknown keys {unknown} (allowed: {sorted(ROW_KEYS)})")
    for name in ("app", "user", "session"):
        if not isinstance(raw.get(name), str):
            raise RowError("required, a string", name)
    try:
        key = make_key(raw["app"], raw["user"])
        session = check_session(raw["session"])
    except MemoryServiceError as exc:
        raise RowError(str(exc), exc.field) from None
    events_raw = raw.get("events")
    if not isinstance(events_raw, list) or not events_raw:
        raise RowError("required, a non-empty list", "events")
    try:
        events = parse_events([_event(e, i) for i, e in enumerate(events_raw)])
    except MemoryServiceError as exc:
        raise RowError(str(exc), exc.field) from None
    events.sort(key=lambda e: e.timestamp)  # stable: equal times keep the archive's order
    return SessionRow(key, session, events, _names(raw.get("names")))


def _event(raw: Any, index: int) -> Any:
    if not isinstance(raw, Mapping):
        raise RowError("must be an object", f"events.{index}")
    event = {k: v for k, v in raw.items() if v is not None}
    calls = event.get("tool_calls")
    if isinstance(calls, str):
        try:
            event["tool_calls"] = json.loads(calls) if calls.strip() else []
        except json.JSONDecodeError:
            raise RowError("not valid JSON", f"events.{index}.tool_calls") from None
    ts = event.get("timestamp")
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        event["timestamp"] = datetime.fromtimestamp(ts, UTC)
    return event


def _names(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise RowError("must be an object mapping user/assistant to a speaker name", "names")
    out: dict[str, str] = {}
    for role, name in raw.items():
        if role not in NAME_ROLES:
            raise RowError(f"unknown role {role!r} (user or assistant)", "names")
        if name is None:
            continue
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS or "\n" in name:
            raise RowError(f"a speaker name is 1..{MAX_NAME_CHARS} characters on one line", f"names.{role}")
        out[str(role)] = name.strip()
    return out or None
