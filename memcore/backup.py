"""The backup format of one app's memories: JSON Lines, one stored :class:`Entry` per line.

- Every field of the entry is kept: id, app, user, text, topics, kind, event_time,
  participants, location, source, provenance, created_at, updated_at and the ``deleted_at``
  tombstone (soft-deleted entries are exported and restored as tombstones).
- Order is deterministic: by user, then id. An export restored into an empty service and
  exported again gives the same bytes.
- A restore writes the entries as they are (ids and timestamps kept; only the vectors are
  recomputed with the service's embedder). Ids must be the canonical, content-addressed id of
  the entry's content and scope (what the service itself assigns): a foreign id could otherwise
  name a point of another app or user in a shared store.

:func:`parse_jsonl` validates a whole file before anything is written and raises
:class:`ValidationError` naming the line (``lines.<n>.<field>``) of the first bad one (a line is parsed
within the bounds of :mod:`memcore.jsontext`: nesting depth, number length).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import pydantic
from pydantic import ConfigDict, field_validator, model_validator

from memcore import jsontext
from memcore.errors import ValidationError
from memcore.fields import AppId, UserId, utc
from memcore.ids import memory_id
from memcore.model import Entry, UserKey
from memcore.validation import first_error

#: The order of the keys of an exported line (scope first, timestamps last).
LINE_FIELDS = (
    "id", "app", "user", "kind", "text", "topics", "event_time", "participants", "location", "source",
    "provenance", "created_at", "updated_at", "deleted_at",
)
MAX_ENTRY_ID_CHARS = 256


class BackupEntry(Entry):
    """One line of a backup: a whole entry, strictly validated (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not v or len(v) > MAX_ENTRY_ID_CHARS:
            raise ValueError(f"id must be 1..{MAX_ENTRY_ID_CHARS} characters")
        return v

    app: AppId
    user: UserId

    @field_validator("created_at", "updated_at", "deleted_at")
    @classmethod
    def _times(cls, v: datetime | None) -> datetime | None:
        return utc(v) if v is not None else None

    @model_validator(mode="after")
    def _consistent(self) -> BackupEntry:
        for value in _strings(self.model_dump(mode="python")):
            value.encode("utf-8")  # lone surrogates raise UnicodeEncodeError, a ValueError
        if self.id != memory_id(UserKey(app=self.app, user=self.user), self.memory()):
            raise ValueError("id does not match the entry's content and scope (ids are content-addressed)")
        return self


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def check_entry(data: Any) -> Entry:
    """``data`` (an Entry, a dict) as a plain :class:`Entry`; raises ``pydantic.ValidationError``."""
    if isinstance(data, pydantic.BaseModel):
        data = data.model_dump()
    checked = BackupEntry.model_validate(data)
    return Entry.model_validate(checked.model_dump())


def encode_line(entry: Entry) -> str:
    """One JSON line (with its newline) holding every field of ``entry``; ASCII only (non-ASCII text is
    escaped), so no Unicode line separator can split a line for any reader."""
    data = entry.model_dump(mode="json", by_alias=True)  # the caller key as ``key``, as in the API
    ordered = {k: data[k] for k in LINE_FIELDS}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    return json.dumps(ordered, ensure_ascii=True, separators=(",", ":")) + "\n"


def sort_key(entry: Entry) -> tuple[str, str, str]:
    return entry.app, entry.user, entry.id


def _line_error(lineno: int, message: str, loc: str | None = None) -> ValidationError:
    field = f"lines.{lineno}" + (f".{loc}" if loc else "")
    where = f"line {lineno}" + (f", field {loc}" if loc else "")
    return ValidationError(f"{where}: {message}", field=field)


def parse_line(raw: bytes | str, lineno: int, app: str | None = None) -> Entry:
    """Validate one line; raises :class:`ValidationError` naming ``lines.<lineno>[.<field>]``."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise _line_error(lineno, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        data = jsontext.loads(text)
    except jsontext.JSONTextError as exc:
        raise _line_error(lineno, str(exc)) from None
    if not isinstance(data, dict):
        raise _line_error(lineno, "each line must be a JSON object (one entry)")
    if app is not None and "app" in data and data["app"] != app:
        raise _line_error(lineno, f"the entry belongs to app {data['app']!r}, not {app!r}", "app")
    try:
        entry = check_entry(data)
    except pydantic.ValidationError as exc:
        raise _line_error(lineno, *first_error(exc.errors())) from None
    except RecursionError:
        raise _line_error(lineno, "nesting too deep") from None
    if app is not None and entry.app != app:
        raise _line_error(lineno, f"the entry belongs to app {entry.app!r}, not {app!r}", "app")
    return entry


def parse_jsonl(data: bytes | str | Iterable[bytes | str], app: str | None = None) -> list[Entry]:
    """Every entry of a JSONL backup, validated as a whole: blank lines are skipped, a bad line,
    a line of another app (when ``app`` is given) or a repeated id raises :class:`ValidationError`."""
    if isinstance(data, bytes | str):
        lines: Iterable[bytes | str] = data.split("\n") if isinstance(data, str) else data.split(b"\n")
    else:
        lines = data
    entries: list[Entry] = []
    first_line: dict[tuple[str, str, str], int] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        entry = parse_line(raw, lineno, app)
        seen = first_line.setdefault(sort_key(entry), lineno)
        if seen != lineno:
            raise _line_error(lineno, f"duplicate entry id (first on line {seen})", "id")
        entries.append(entry)
    return entries
