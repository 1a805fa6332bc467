"""The domain model: who a memory belongs to and what it says (searches: :mod:`memcore.search_model`).

Validation limits (a bad value raises :class:`pydantic.ValidationError`, which the
service turns into :class:`memcore.errors.ValidationError` naming the field):

- identifiers (app, user, session; :data:`AppId`, :data:`UserId`, :data:`SessionId`, one rule,
  :func:`check_identifier`): 1..128 characters, no control, format (zero-width) or unassigned
  characters, no '/', no outer whitespace;
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
  ``ttl_s`` / ``expires_at`` (neither given: the entry does not expire; :meth:`Memory.expiry`). An
  update (:class:`MemoryPatch`) keeps the expiry unless it names one: ``ttl_s`` restarts the lifetime
  (``now + ttl_s``), ``expires_at`` sets it, ``expires_at: null`` removes it (``ttl_s: null`` is
  refused: it would be ambiguous); the id is kept (the expiry is not part of it). An entry past
  ``expires_at`` is expired (:meth:`Entry.expired`, the one rule): no read returns it and the
  maintenance sweep deletes it (:mod:`actors.maintenance`).
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core.core_schema import ValidationInfo

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


class Kind(StrEnum):
    FACT = "fact"
    EPISODE = "episode"


class Source(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


def check_identifier(value: str, what: str) -> str:
    """The one identifier rule (apps, users, sessions): see the module docstring."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"{what} is longer than {MAX_ID_CHARS} characters")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError(f"{what} contains control or unassigned characters")
    if "/" in value:
        raise ValueError(f"{what} must not contain '/' (it is a path segment of the HTTP API)")
    if value != value.strip():
        raise ValueError(f"{what} has leading or trailing whitespace")
    return value


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


class UserKey(BaseModel):
    """The hard scope of every read and write."""

    model_config = ConfigDict(frozen=True)

    app: AppId
    user: UserId


class SessionRef(BaseModel):
    """A session id on its own (validated as :data:`SessionId`)."""

    model_config = ConfigDict(frozen=True)

    session: SessionId


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


def _metadata_or_none(v: Any) -> dict[str, Any] | None:
    return None if v is None else check_metadata(v)


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
"""The field types of a memory, each with its rule (one home: :class:`Memory` and :class:`MemoryPatch`)."""


class Memory(BaseModel):
    """What a caller (tool, API or extractor) says about a memory: everything but ids and times.

    ``model_fields_set`` tells what the caller actually gave: an update changes only those fields
    (:meth:`memcore.service.MemoryService.update`)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)

    text: Text
    topics: Topics = Field(default_factory=list)
    kind: Kind = Kind.FACT
    event_time: EventTime = None
    participants: Participants = Field(default_factory=list)
    location: Location = None
    source: Source = Source.USER
    provenance: Provenance = Field(default_factory=list)
    metadata: Metadata = Field(default_factory=dict)
    item_key: ItemKey = Field(default=None, alias="key", serialization_alias="key")
    """The caller's key (JSON ``key``): unique per (app, user); same key -> same item, replaced."""
    ttl_s: TtlSeconds = None
    """Lifetime in seconds from this write (sets the entry's ``expires_at``); None: never expires."""
    expires_at: EventTime = None
    """An absolute expiry instead of ``ttl_s`` (after the write); None: never expires."""

    @field_validator("expires_at")
    @classmethod
    def _one_expiry(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        return _one_expiry(v, info)

    def expiry(self, now: datetime) -> datetime | None:
        """The expiry an add sets: ``ttl_s`` after the write, ``expires_at``, or none."""
        return now + timedelta(seconds=self.ttl_s) if self.ttl_s is not None else self.expires_at


def _one_expiry(v: datetime | None, info: ValidationInfo) -> datetime | None:
    if v is not None and info.data.get("ttl_s") is not None:
        raise ValueError("give ttl_s or expires_at, not both")
    return v


PATCH_FIELDS: tuple[str, ...] = ("text", "topics", "kind", "event_time", "participants", "location", "metadata",
                                 "item_key")
"""The content an update may change; every other field of the entry is kept (provenance grows)."""
EXPIRY_FIELDS: tuple[str, ...] = ("ttl_s", "expires_at")
"""What an update may say about the expiry (see the module docstring); not part of the id."""


class MemoryPatch(BaseModel):
    """An update: only the fields given change (text, topics, kind, event time, participants,
    location, metadata, key, and the expiry: ``ttl_s`` or ``expires_at``); at least one is required.
    ``null`` clears ``event_time``, ``location``, ``key`` or ``expires_at`` (no expiry)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)

    text: Text | None = None
    topics: Topics | None = None
    kind: Kind | None = None
    event_time: EventTime = None
    participants: Participants | None = None
    location: Location = None
    metadata: Annotated[dict[str, Any] | None, BeforeValidator(_metadata_or_none)] = None
    item_key: ItemKey = Field(default=None, alias="key", serialization_alias="key")
    provenance: Provenance = Field(default_factory=list)
    ttl_s: TtlSeconds = None
    """A new lifetime from this update: ``expires_at`` becomes now + ttl_s."""
    expires_at: EventTime = None
    """A new absolute expiry (after the update); ``null`` removes the expiry."""

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        if v is None:
            raise ValueError("memory text must not be null (leave it out to keep it)")
        return v

    @field_validator("ttl_s", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> Any:
        if v is None:
            raise ValueError("ttl_s must not be null (leave it out to keep the expiry; expires_at: null removes it)")
        return v

    @field_validator("expires_at")
    @classmethod
    def _one_expiry(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        return _one_expiry(v, info)

    @model_validator(mode="after")
    def _something(self) -> MemoryPatch:
        if not (self.model_fields_set & {*PATCH_FIELDS, *EXPIRY_FIELDS}):
            names = ", ".join(f.replace("item_key", "key") for f in (*PATCH_FIELDS, *EXPIRY_FIELDS))
            raise ValueError(f"nothing to update: give at least one of {names}")
        return self

    def expiry(self, now: datetime, current: datetime | None) -> datetime | None:
        """The expiry after this update: ``ttl_s`` from ``now``, ``expires_at`` (None: none), or ``current``."""
        if self.ttl_s is not None:
            return now + timedelta(seconds=self.ttl_s)
        return self.expires_at if "expires_at" in self.model_fields_set else current

    def names_expiry(self) -> bool:
        return bool(self.model_fields_set & set(EXPIRY_FIELDS))

    def changes(self) -> dict[str, Any]:
        """The fields the caller gave (``None`` lists are left out: they mean "keep")."""
        out = {f: getattr(self, f) for f in PATCH_FIELDS if f in self.model_fields_set}
        return {f: v for f, v in out.items() if not (v is None and f in ("topics", "participants", "kind", "metadata"))}

    @classmethod
    def of(cls, memory: Memory) -> MemoryPatch:
        """The fields a :class:`Memory` was given, as a patch (the extractor's and policies' updates)."""
        given = memory.model_fields_set & set(PATCH_FIELDS) | {"text"}
        return cls.model_validate({f: getattr(memory, f) for f in given} | {"provenance": memory.provenance})


class Entry(Memory):
    """A stored memory: the Memory plus identity, scope and timestamps.

    ``deleted_at`` is the soft-delete tombstone; an entry with it set is invisible to
    reads and searches but keeps its id (a re-add reactivates it).
    """

    model_config = ConfigDict(extra="ignore", validate_by_name=True, validate_by_alias=True)

    id: str
    app: str
    user: str
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    expires_at: EventTime = None
    """When this entry expires (set by the add that wrote it or a later update); None: never."""
    ttl_s: TtlSeconds = Field(default=None, exclude=True)
    """Not stored: an entry keeps ``expires_at`` (the field is the write's, see :class:`Memory`)."""
    replaces: str | None = Field(default=None, exclude=True)
    """A pending rotation: the id of the entry this one replaces, set while an update that rotates
    the id has written this entry and not yet retired the old one (never shown: not dumped; see
    :meth:`memcore.service.MemoryService.finish_rotations`)."""

    @property
    def key(self) -> UserKey:
        return UserKey(app=self.app, user=self.user)

    @property
    def active(self) -> bool:
        return self.deleted_at is None

    def expired(self, at: datetime) -> bool:
        """The one rule of a per-entry expiry: ``expires_at`` is set and not after ``at``."""
        return self.expires_at is not None and self.expires_at <= at

    def memory(self) -> Memory:
        return Memory.model_validate(self.model_dump(include=set(Memory.model_fields)))

    def to_payload(self) -> dict[str, Any]:
        """The vector-store payload: the whole entry plus numeric fields for filters."""
        data = self.model_dump(mode="json")
        data["event_ts"] = self.event_time.timestamp() if self.event_time else None
        data["updated_ts"] = self.updated_at.timestamp()
        data["deleted"] = self.deleted_at is not None
        data["expires_ts"] = self.expires_at.timestamp() if self.expires_at else None
        if self.replaces is not None:
            data["replaces"] = self.replaces
        return data

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Entry:
        return cls.model_validate(payload)


OperationType = Literal["add", "update", "delete", "clear"]


class Operation(BaseModel):
    """What an extractor proposes. Deterministic code (policy, reconcile) decides."""

    model_config = ConfigDict(extra="forbid")

    type: OperationType
    memory: Memory | None = None
    memory_id: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> Operation:
        if self.type in ("add", "update") and self.memory is None:
            raise ValueError(f"{self.type} needs a memory")
        if self.type in ("update", "delete") and not self.memory_id:
            raise ValueError(f"{self.type} needs a memory_id")
        return self


class InjectionMode(StrEnum):
    SYSTEM = "system"
    USER = "user"


PreloadStrategy = Literal["off", "all", "search", "recent", "failed"]


class PreloadResult(BaseModel):
    entries: list[Entry]
    text: str
    mode: InjectionMode
    strategy: PreloadStrategy
    cut: dict[str, list[str]] = Field(default_factory=dict)
    """Entry id → the turn ids left out of its text to fit ``max_tokens``; only entries that were cut."""
