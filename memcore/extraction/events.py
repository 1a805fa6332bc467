"""Conversation events, the extraction delta and the existing-memory query built from it.

A :class:`Message` is one message of a session as a client sends it: OpenAI's chat shape
(``role``, ``content`` as a string or content parts, ``tool_calls``, ``tool_call_id``, ``name``),
with an optional ``id`` and ``timestamp``. The shard turns each into a complete :class:`Event`
(:func:`identify`): it tells what is already archived from what is new, gives new messages ids,
and stamps messages without a time with the time of receipt (monotonic within the session).

Only user/assistant text is extracted: tool results, system/developer messages, assistant
messages that carry nothing but tool calls and empty messages are excluded (seed 004,
``scanDeltaSince``). The delta of a session is what the archive holds and has not extracted yet,
in arrival order (:class:`memcore.archive_ports.EventRepository`): a client's clock never hides a new event.

Validation limits (a bad value raises :class:`pydantic.ValidationError`;
:func:`memcore.validation.validate` turns it into :class:`memcore.errors.ValidationError` naming the field):

- id: 1..256 characters, no control characters, nothing a URL would change (it is a path segment of
  ``DELETE .../sessions/{session}/events/{event_id}``; :mod:`memclient.segments`);
- content: at most 65,536 bytes (UTF-8) of text; tool_calls: at most 128 objects;
- tool_call_id, name: at most 256 characters; timestamp: ISO-8601 (naive values are taken as
  UTC), not later than the time of receipt plus the configured clock skew (:func:`identify`);
- a batch (:func:`parse_events`, :func:`parse_messages`): at most 2,000 events, given ids unique.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memclient.segments import check_segment
from memcore.errors import ValidationError
from memcore.fields import utc
from memcore.graph import FactOperation
from memcore.model import Operation
from memcore.validation import validate

MAX_EVENT_ID_CHARS = 256
MAX_EVENT_CONTENT_BYTES = 65_536
MAX_TOOL_CALLS = 128
MAX_EVENTS = 2_000
MAX_QUERY_CHARS = 1_000

Role = Literal["user", "assistant", "tool", "system", "developer"]
"""OpenAI's chat roles; only user and assistant text is archived and extracted."""
ONE_US = timedelta(microseconds=1)


def check_event_id(v: str) -> str:
    if not v or not v.strip():
        raise ValueError("event id must not be empty")
    if len(v) > MAX_EVENT_ID_CHARS:
        raise ValueError(f"event id is longer than {MAX_EVENT_ID_CHARS} characters")
    if any(unicodedata.category(ch).startswith("C") for ch in v):
        raise ValueError("event id contains control or unassigned characters")
    return check_segment(v, "event id")


def check_content(v: str) -> str:
    if len(v.encode("utf-8")) > MAX_EVENT_CONTENT_BYTES:
        raise ValueError(f"event content is longer than {MAX_EVENT_CONTENT_BYTES} bytes")
    return v


def check_tool_calls(v: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(v) > MAX_TOOL_CALLS:
        raise ValueError(f"more than {MAX_TOOL_CALLS} tool calls")
    return v


def check_short(v: str | None) -> str | None:
    if v is not None and len(v) > MAX_EVENT_ID_CHARS:
        raise ValueError(f"longer than {MAX_EVENT_ID_CHARS} characters")
    return v


class Event(BaseModel):
    """One message of a session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: Role
    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    """OpenAI's optional participant name (kept on the event, not archived)."""
    timestamp: datetime
    external_context: bool = False
    """Set by the client on events that carry retrieved knowledge (RAG results, documents)."""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return check_event_id(v)

    @field_validator("content")
    @classmethod
    def _content(cls, v: str) -> str:
        return check_content(v)

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return check_tool_calls(v)

    @field_validator("tool_call_id", "name")
    @classmethod
    def _short(cls, v: str | None) -> str | None:
        return check_short(v)

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
    """Complete events as a bulk write carries them (ids unique, at most MAX_EVENTS)."""

    model_config = ConfigDict(extra="forbid")

    events: list[Event] = Field(max_length=MAX_EVENTS)

    @field_validator("events")
    @classmethod
    def _unique(cls, v: list[Event]) -> list[Event]:
        _check_unique([e.id for e in v])
        return v


def _check_unique(ids: Iterable[str | None]) -> None:
    seen: set[str] = set()
    for i in ids:
        if i is None:
            continue
        if i in seen:
            raise ValueError(f"duplicate event id {i!r}")
        seen.add(i)


class ContentPart(BaseModel):
    """One OpenAI content part: ``{"type": "text", "text": ...}`` is kept, every other type is ignored."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = Field(min_length=1, max_length=64)
    text: str | None = None


class Message(BaseModel):
    """One message as a client holds it (OpenAI's chat message shape); ``id`` and ``timestamp`` optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = Field(default=None, description="Unique in the session; without one the server "
                                                     "recognises resent messages (see the ingest route).")
    role: Role
    content: str | list[ContentPart] | None = Field(
        default="", description="A string, or OpenAI content parts (text parts are kept, others ignored).")
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    timestamp: datetime | None = Field(default=None, description="ISO-8601; default: the time of receipt.")
    external_context: bool = False

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        return None if v is None else check_event_id(v)

    @field_validator("content")
    @classmethod
    def _content(cls, v: str | list[ContentPart] | None) -> str | list[ContentPart] | None:
        check_content(_joined(v))
        return v

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return None if v is None else check_tool_calls(v)

    @field_validator("tool_call_id", "name")
    @classmethod
    def _short(cls, v: str | None) -> str | None:
        return check_short(v)

    @field_validator("timestamp")
    @classmethod
    def _timestamp(cls, v: datetime | None) -> datetime | None:
        return None if v is None else utc(v)

    @property
    def text(self) -> str:
        """The text the message carries: the string, or its text parts joined by newlines."""
        return _joined(self.content)

    @property
    def ignored_parts(self) -> int:
        """Content parts that are not text (images, audio, files): ignored, counted."""
        return sum(1 for p in self.content if p.type != "text") if isinstance(self.content, list) else 0

    def event(self, event_id: str, timestamp: datetime) -> Event:
        return Event(id=event_id, role=self.role, content=self.text, tool_calls=self.tool_calls or [],
                     tool_call_id=self.tool_call_id, name=self.name, timestamp=timestamp,
                     external_context=self.external_context)


def _joined(content: str | list[ContentPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text or "" for p in content if p.type == "text")


class MessageBatch(BaseModel):
    """A session's messages as one ingest request carries them (at most MAX_EVENTS, given ids unique)."""

    model_config = ConfigDict(extra="forbid")

    events: list[Message] = Field(max_length=MAX_EVENTS)

    @field_validator("events")
    @classmethod
    def _unique(cls, v: list[Message]) -> list[Message]:
        _check_unique([m.id for m in v])
        return v


def parse_events(data: Iterable[Event | dict[str, Any]]) -> list[Event]:
    """Validate complete events (raises :class:`memcore.errors.ValidationError` naming ``events.<i>.<field>``)."""
    return validate(EventBatch, {"events": list(data)}).events


def parse_messages(data: Iterable[Message | Event | dict[str, Any]]) -> list[Message]:
    """Validate ingest messages (raises :class:`memcore.errors.ValidationError` naming ``events.<i>.<field>``)."""
    items = [m.model_dump(exclude_none=True) if isinstance(m, Event) else m for m in data]
    return validate(MessageBatch, {"events": items}).events


def _same(m: Message, e: Event) -> bool:
    return m.role == e.role and m.text == e.content


def _known(unnamed: Sequence[Message], archived: Sequence[Event]) -> dict[int, Event]:
    """Which of the id-less text messages are already archived (index → archived event).

    The rule (documented on the ingest route): the batch is a resend of the whole session when the
    session's archived turns are a prefix of it, or it a prefix of them; a resent window when the
    archive's last ``j >= 2`` turns open it (a trimmed history); otherwise every message is new
    (the client sends only new messages), even one that repeats an earlier text such as "yes".
    """
    n, a = len(unnamed), len(archived)
    if not n or not a:
        return {}
    head = min(n, a)
    if all(_same(unnamed[i], archived[i]) for i in range(head)):
        return {i: archived[i] for i in range(head)}
    for j in range(min(n, a - 1), 1, -1):
        if all(_same(unnamed[i], archived[a - j + i]) for i in range(j)):
            return {i: archived[a - j + i] for i in range(j)}
    return {}


def identify(
    messages: Sequence[Message], archived: Sequence[Event], *, now: datetime, max_skew: timedelta,
    new_id: Callable[[], str] = lambda: f"m-{uuid.uuid4().hex}",
) -> list[Event]:
    """Complete ``messages`` into events against the session's ``archived`` turns (arrival order).

    A given id is kept (re-archiving an id keeps its first version). An id-less user/assistant text
    message that :func:`_known` recognises takes the archived turn's id and time; every other id-less
    message gets a new id. A missing timestamp is the time of receipt, strictly after the session's
    newest turn and the batch's earlier messages (monotonic within the session). A timestamp later
    than ``now + max_skew`` raises :class:`ValidationError` naming ``events.<i>.timestamp``.
    """
    now = utc(now)
    for i, m in enumerate(messages):
        if m.timestamp is not None and m.timestamp > now + max_skew:
            raise ValidationError(f"timestamp {m.timestamp.isoformat()} is in the future (more than "
                                  f"{max_skew.total_seconds():g} s after the server's clock)",
                                  field=f"events.{i}.timestamp")
    unnamed = [i for i, m in enumerate(messages) if m.id is None and m.role in ("user", "assistant") and m.text.strip()]
    known = {unnamed[k]: ev for k, ev in _known([messages[i] for i in unnamed], archived).items()}
    clock: datetime | None = max((e.timestamp for e in archived), default=None)
    out: list[Event] = []
    for i, m in enumerate(messages):
        if i in known:
            out.append(m.event(known[i].id, known[i].timestamp))
            continue
        if m.timestamp is None:
            clock = now if clock is None else max(now, clock + ONE_US)
            when = clock
        else:
            when = m.timestamp
        out.append(m.event(m.id if m.id is not None else new_id(), when))
    return out


def extractable(events: Iterable[Event]) -> list[Event]:
    """The events extraction looks at, in the given order: user/assistant text only (tool results,
    tool-call-only assistant messages, system messages and empty or whitespace-only messages are
    excluded); a repeated id keeps its first occurrence."""
    seen: set[str] = set()
    out: list[Event] = []
    for ev in events:
        if ev.id in seen:
            continue
        seen.add(ev.id)
        if ev.is_text:
            out.append(ev)
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
    facts: list[FactOperation] = Field(default_factory=list)
    """Knowledge-graph fact operations (an extractor offered :data:`memcore.vocabulary.FACT_TOOLS`)."""
