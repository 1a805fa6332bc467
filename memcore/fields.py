"""The field types of the domain model and their rules, one home for each limit.

Validation limits (a bad value raises :class:`pydantic.ValidationError`, which the
service turns into :class:`memcore.errors.ValidationError` naming the field):

- identifiers (app, user, session; :data:`AppId`, :data:`UserId`, :data:`SessionId`, one rule,
  :func:`check_identifier`): 1..128 characters, no control, format (zero-width) or unassigned
  characters, no outer whitespace, and nothing a URL would change (:mod:`memclient.segments`: not
  ``.`` or ``..``, no ``/``, nor their percent-encoded forms such as ``%2e`` or ``%2F``);
- memory text: 1..8192 bytes (UTF-8) after stripping;
- topics: at most 32, each 1..64 characters; participants: at most 64, each 1..64 characters
  (:data:`MAX_NAME_CHARS`, also the limit of a speaker name);
- location: at most 256 characters; provenance: at most 1024 ids;
- event_time: ISO-8601 (naive values are taken as UTC);
- metadata: a small JSON object, limits in :mod:`memcore.metadata` (not part of the id);
- item_key (``key`` in JSON): an optional caller key, 1..512 characters, no control characters, no
  outer whitespace. A keyed memory's id is derived from (app, user, key) alone, so writing the same
  key again replaces the item (text, metadata and all); see :func:`memcore.ids.memory_id`.
- ttl_s: an optional lifetime of the memory in seconds (0 < ttl_s <= :data:`MAX_TTL_S`); expires_at:
  an optional absolute expiry instead (ISO-8601, naive is UTC; it must be after the write, which the
  service checks against its clock); not both. Every add sets the entry's ``expires_at`` from its own
  ``ttl_s`` / ``expires_at`` (neither given: the entry does not expire; :meth:`memcore.model.Memory.expiry`). An
  update (:class:`memcore.model.MemoryPatch`) keeps the expiry unless it names one: ``ttl_s`` restarts the lifetime
  (``now + ttl_s``), ``expires_at`` sets it, ``expires_at: null`` removes it (``ttl_s: null`` is
  refused: it would be ambiguous); the id is kept (the expiry is not part of it). An entry past
  ``expires_at`` is expired (:meth:`memcore.model.Entry.expired`, the one rule): no read returns it and the
  maintenance sweep deletes it (:mod:`actors.maintenance`).
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from memclient.segments import check_segment
from memcore.metadata import check_metadata

MAX_ID_CHARS = 128
MAX_TEXT_BYTES = 8192
MAX_TOPICS = 32
MAX_TOPIC_CHARS = 64
MAX_PARTICIPANTS = 64
MAX_NAME_CHARS = 64
MAX_LOCATION_CHARS = 256
MAX_PROVENANCE = 1024
MAX_RESULTS_LIMIT = 1000
MAX_ITEM_KEY_CHARS = 512
MAX_TTL_S = 100 * 365 * 86400.0
"""The longest per-memory lifetime (``ttl_s``): about a hundred years."""


def check_identifier(value: str, what: str) -> str:
    """The one identifier rule (apps, users, sessions): see the module docstring."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"{what} is longer than {MAX_ID_CHARS} characters")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError(f"{what} contains control or unassigned characters")
    if value != value.strip():
        raise ValueError(f"{what} has leading or trailing whitespace")
    return check_segment(value, what)


def _identifier(what: str) -> AfterValidator:
    return AfterValidator(lambda v: check_identifier(v, what))


AppId = Annotated[str, _identifier("app")]
UserId = Annotated[str, _identifier("user")]
SessionId = Annotated[str, _identifier("session")]


def encodable(value: str, what: str) -> str:
    """``value`` if it is valid Unicode text (UTF-8 encodable); a lone surrogate such as the JSON
    escape ``\\ud800`` raises ValueError (stores and responses could not encode it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} contains a lone surrogate (not valid Unicode text)") from None
    return value


def utc(value: datetime) -> datetime:
    """Naive datetimes are UTC; aware ones are converted to UTC. A value that leaves the calendar's
    range once converted (``0001-01-01T00:00:00+01:00``) raises ValueError (bad input, a 422)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("date-time is out of range once converted to UTC") from None


def now_utc() -> datetime:
    return datetime.now(UTC)


def check_text(v: str) -> str:
    v = v.strip()
    if not v:
        raise ValueError("memory text must not be empty")
    if len(v.encode("utf-8")) > MAX_TEXT_BYTES:
        raise ValueError(f"memory text is longer than {MAX_TEXT_BYTES} bytes")
    return v


def _names(v: list[str], what: str, max_chars: int, max_count: int) -> list[str]:
    out: list[str] = []
    for t in v:
        t = encodable(t, what).strip()
        if not t:
            continue
        if len(t) > max_chars:
            raise ValueError(f"{what} longer than {max_chars} characters")
        if t not in out:
            out.append(t)
    if len(out) > max_count:
        raise ValueError(f"more than {max_count} {what}s")
    return out


def check_topics(v: list[str]) -> list[str]:
    return _names(v, "topic", MAX_TOPIC_CHARS, MAX_TOPICS)


def check_participants(v: list[str]) -> list[str]:
    return _names(v, "participant", MAX_NAME_CHARS, MAX_PARTICIPANTS)


def check_location(v: str | None) -> str | None:
    if v is None:
        return None
    v = encodable(v, "location").strip()
    if len(v) > MAX_LOCATION_CHARS:
        raise ValueError(f"location longer than {MAX_LOCATION_CHARS} characters")
    return v or None


def check_provenance(v: list[str]) -> list[str]:
    if len(v) > MAX_PROVENANCE:
        raise ValueError(f"more than {MAX_PROVENANCE} provenance ids")
    for p in v:
        encodable(p, "provenance id")
    return v


def _utc_or_none(v: datetime | None) -> datetime | None:
    return utc(v) if v is not None else None


def check_item_key(v: str | None) -> str | None:
    if v is None:
        return None
    encodable(v, "key")
    if not v or len(v) > MAX_ITEM_KEY_CHARS:
        raise ValueError(f"key must be 1..{MAX_ITEM_KEY_CHARS} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Cn") for ch in v):
        raise ValueError("key contains control or unassigned characters")
    if v != v.strip():
        raise ValueError("key has leading or trailing whitespace")
    return v


Text = Annotated[str, AfterValidator(check_text)]
Topics = Annotated[list[str], AfterValidator(check_topics)]
Participants = Annotated[list[str], AfterValidator(check_participants)]
Location = Annotated[str | None, AfterValidator(check_location)]
EventTime = Annotated[datetime | None, AfterValidator(_utc_or_none)]
Provenance = Annotated[list[str], AfterValidator(check_provenance)]
Metadata = Annotated[dict[str, Any], BeforeValidator(check_metadata)]
ItemKey = Annotated[str | None, AfterValidator(check_item_key)]
TtlSeconds = Annotated[float, Field(gt=0, le=MAX_TTL_S, allow_inf_nan=False)] | None
"""The field types of a memory, each with its rule (one home: :class:`memcore.model.Memory` and
:class:`memcore.model.MemoryPatch`)."""
