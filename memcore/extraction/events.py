"""Conversation events, the extraction delta and the existing-memory query built from it.

An :class:`Event` is one message of a session as the client sends it (the whole session may
be sent each turn). Only the *delta* after the session's ``last_extract_at`` cursor counts, and
only user/assistant text: tool results, assistant messages that carry nothing but tool calls
and empty messages are excluded (seed 004, ``scanDeltaSince``).

Validation limits (a bad value raises :class:`pydantic.ValidationError`;
:func:`memcore.validation.validate` turns it into :class:`memcore.errors.ValidationError` naming the field):

- id: 1..256 characters, no control characters;
- content: at most 65,536 bytes (UTF-8); tool_calls: at most 128 objects;
- tool_call_id: at most 256 characters; timestamp: ISO-8601 (naive values are taken as UTC);
- a batch (:func:`parse_events`): at most 2,000 events, ids unique.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memcore.model import Operation, utc
from memcore.validation import validate

MAX_EVENT_ID_CHARS = 256
MAX_EVENT_CONTENT_BYTES = 65_536
MAX_TOOL_CALLS = 128
MAX_EVENTS = 2_000
MAX_QUERY_CHARS = 1_000

Role = Literal["user", "assistant", "tool"]


class Event(BaseModel):
    """One message of a session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: Role
    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    timestamp: datetime
    external_context: bool = False
    """Set by the client on events that carry retrieved knowledge (RAG results, documents)."""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("event id must not be empty")
        if len(v) > MAX_EVENT_ID_CHARS:
            raise ValueError(f"event id is longer than {MAX_EVENT_ID_CHARS} characters")
        if any(unicodedata.category(ch).startswith("C") for ch in v):
            raise ValueError("event id contains control or unassigned characters")
        return v

    @field_validator("content")
    @classmethod
    def _content(cls, v: str) -> str:
        if len(v.encode("utf-8")) > MAX_EVENT_CONTENT_BYTES:
            raise ValueError(f"event content is longer than {MAX_EVENT_CONTENT_BYTES} bytes")
        return v

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(v) > MAX_TOOL_CALLS:
            raise ValueError(f"more than {MAX_TOOL_CALLS} tool calls")
        return v

    @field_validator("tool_call_id")
    @classmethod
    def _tool_call_id(cls, v: str | None) -> str | None:
        if v is not None and len(v) > MAX_EVENT_ID_CHARS:
            raise ValueError(f"tool_call_id is longer than {MAX_EVENT_ID_CHARS} characters")
        return v

    @field_validator("timestamp")
    @classmethod
    def _timestamp(cls, v: datetime) -> datetime:
        return utc(v)

    @property
    def text(self) -> str:
        """The message text, stripped."""
        return self.content.strip()

    @property
    def is_text(self) -> bool:
        """A user or assistant message with non-empty text (what extraction looks at)."""
        return self.role in ("user", "assistant") and bool(self.text)


class EventBatch(BaseModel):
    """A batch of events as one request body carries them (ids unique, at most MAX_EVENTS)."""

    model_config = ConfigDict(extra="forbid")

    events: list[Event] = Field(max_length=MAX_EVENTS)

    @field_validator("events")
    @classmethod
    def _unique(cls, v: list[Event]) -> list[Event]:
        seen: set[str] = set()
        for ev in v:
            if ev.id in seen:
                raise ValueError(f"duplicate event id {ev.id!r}")
            seen.add(ev.id)
        return v


def parse_events(data: Iterable[Event | dict[str, Any]]) -> list[Event]:
    """Validate a list of events (raises :class:`memcore.errors.ValidationError` naming ``events.<i>.<field>``)."""
    return validate(EventBatch, {"events": list(data)}).events


def delta(events: Sequence[Event], last_extract_at: datetime | None) -> list[Event]:
    """The events after the cursor (strictly) that extraction looks at, oldest first.

    User/assistant text only: tool results, tool-call-only assistant messages and empty or
    whitespace-only messages are excluded. Order is by timestamp (stable for equal times);
    a repeated id keeps its first occurrence.
    """
    cursor = utc(last_extract_at) if last_extract_at is not None else None
    seen: set[str] = set()
    out: list[Event] = []
    for ev in events:
        if ev.id in seen:
            continue
        seen.add(ev.id)
        if cursor is not None and ev.timestamp <= cursor:
            continue
        if ev.is_text:
            out.append(ev)
    out.sort(key=lambda e: e.timestamp)
    return out


def cursor_of(events: Sequence[Event]) -> datetime | None:
    """The timestamp the cursor moves to after ``events`` were processed (the latest one)."""
    return max((e.timestamp for e in events), default=None)


def carries_external_context(events: Iterable[Event]) -> bool:
    """True when any event is marked as carrying retrieved knowledge (the external-context guard)."""
    return any(e.external_context for e in events)


def build_query(events: Sequence[Event], max_chars: int = MAX_QUERY_CHARS) -> str:
    """The existing-memory search query: the newest user messages, oldest first, at most ``max_chars``.

    With no user text in ``events`` the assistant text is used instead.
    """
    texts = [e.text for e in events if e.role == "user" and e.text] or [e.text for e in events if e.is_text]
    picked: list[str] = []
    used = 0
    for text in reversed(texts):
        room = max_chars - used - (1 if picked else 0)
        if room <= 0:
            break
        piece = " ".join(text.split())[:room].rstrip()
        picked.append(piece)
        used += len(piece) + (1 if len(picked) > 1 else 0)
    return " ".join(reversed(picked)).strip()


class ExtractionResult(BaseModel):
    """What an extractor returns: proposed operations plus the tool calls it rejected (with why)."""

    operations: list[Operation] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
