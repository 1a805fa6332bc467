"""The domain model: who a memory belongs to, what it says, how it is searched.

Validation limits (a bad value raises :class:`pydantic.ValidationError`, which the
service turns into :class:`memcore.errors.ValidationError` naming the field):

- app / user ids: 1..128 characters, no control characters, no '/', no outer whitespace;
- memory text: 1..8192 bytes (UTF-8) after stripping;
- topics: at most 32, each 1..64 characters; participants: at most 64, each 1..128;
- location: at most 256 characters; provenance: at most 1024 ids;
- event_time: ISO-8601 (naive values are taken as UTC);
- metadata: a small JSON object, limits in :mod:`memcore.metadata` (not part of the id);
- item_key (``key`` in JSON): an optional caller key, 1..512 characters, no control characters, no
  outer whitespace. A keyed memory's id is derived from (app, user, key) alone, so writing the same
  key again replaces the item (text, metadata and all); see :func:`memcore.ids.memory_id`.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memcore.metadata import Scalar, check_filter, check_metadata

MAX_ID_CHARS = 128
MAX_TEXT_BYTES = 8192
MAX_TOPICS = 32
MAX_TOPIC_CHARS = 64
MAX_PARTICIPANTS = 64
MAX_NAME_CHARS = 128
MAX_LOCATION_CHARS = 256
MAX_PROVENANCE = 1024
MAX_RESULTS_LIMIT = 1000
MAX_ITEM_KEY_CHARS = 512


class Kind(StrEnum):
    FACT = "fact"
    EPISODE = "episode"


class Source(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


def _check_identifier(value: str, what: str) -> str:
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


def encodable(value: str, what: str) -> str:
    """``value`` if it is valid Unicode text (UTF-8 encodable); a lone surrogate such as the JSON
    escape ``\\ud800`` raises ValueError (stores and responses could not encode it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} contains a lone surrogate (not valid Unicode text)") from None
    return value


def utc(value: datetime) -> datetime:
    """Naive datetimes are UTC; aware ones are converted to UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def now_utc() -> datetime:
    return datetime.now(UTC)


class UserKey(BaseModel):
    """The hard scope of every read and write."""

    model_config = ConfigDict(frozen=True)

    app: str
    user: str

    @field_validator("app")
    @classmethod
    def _app(cls, v: str) -> str:
        return _check_identifier(v, "app")

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _check_identifier(v, "user")


class Memory(BaseModel):
    """What a caller (tool, API or extractor) says about a memory: everything but ids and times."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)

    text: str
    topics: list[str] = Field(default_factory=list)
    kind: Kind = Kind.FACT
    event_time: datetime | None = None
    participants: list[str] = Field(default_factory=list)
    location: str | None = None
    source: Source = Source.USER
    provenance: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    item_key: str | None = Field(default=None, alias="key", serialization_alias="key")
    """The caller's key (JSON ``key``): unique per (app, user); same key -> same item, replaced."""

    @field_validator("item_key")
    @classmethod
    def _item_key(cls, v: str | None) -> str | None:
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

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, v: Any) -> dict[str, Any]:
        return check_metadata(v)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("memory text must not be empty")
        if len(v.encode("utf-8")) > MAX_TEXT_BYTES:
            raise ValueError(f"memory text is longer than {MAX_TEXT_BYTES} bytes")
        return v

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for t in v:
            t = encodable(t, "topic").strip()
            if not t:
                continue
            if len(t) > MAX_TOPIC_CHARS:
                raise ValueError(f"topic longer than {MAX_TOPIC_CHARS} characters")
            if t not in out:
                out.append(t)
        if len(out) > MAX_TOPICS:
            raise ValueError(f"more than {MAX_TOPICS} topics")
        return out

    @field_validator("participants")
    @classmethod
    def _participants(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for p in v:
            p = encodable(p, "participant").strip()
            if not p:
                continue
            if len(p) > MAX_NAME_CHARS:
                raise ValueError(f"participant longer than {MAX_NAME_CHARS} characters")
            if p not in out:
                out.append(p)
        if len(out) > MAX_PARTICIPANTS:
            raise ValueError(f"more than {MAX_PARTICIPANTS} participants")
        return out

    @field_validator("location")
    @classmethod
    def _location(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = encodable(v, "location").strip()
        if len(v) > MAX_LOCATION_CHARS:
            raise ValueError(f"location longer than {MAX_LOCATION_CHARS} characters")
        return v or None

    @field_validator("event_time")
    @classmethod
    def _event_time(cls, v: datetime | None) -> datetime | None:
        return utc(v) if v is not None else None

    @field_validator("provenance")
    @classmethod
    def _provenance(cls, v: list[str]) -> list[str]:
        if len(v) > MAX_PROVENANCE:
            raise ValueError(f"more than {MAX_PROVENANCE} provenance ids")
        for p in v:
            encodable(p, "provenance id")
        return v


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

    @property
    def key(self) -> UserKey:
        return UserKey(app=self.app, user=self.user)

    @property
    def active(self) -> bool:
        return self.deleted_at is None

    def memory(self) -> Memory:
        return Memory.model_validate(self.model_dump(include=set(Memory.model_fields)))

    def to_payload(self) -> dict[str, Any]:
        """The vector-store payload: the whole entry plus numeric fields for filters."""
        data = self.model_dump(mode="json")
        data["event_ts"] = self.event_time.timestamp() if self.event_time else None
        data["updated_ts"] = self.updated_at.timestamp()
        data["deleted"] = self.deleted_at is not None
        return data

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Entry:
        return cls.model_validate(payload)


class SearchOptions(BaseModel):
    """Every knob of a search. Defaults follow the seeds (max 10, threshold 0.3); the fusion knobs
    (``rrf_k`` .. ``merge_overlapping``) default to the service's configuration when left ``None``."""

    model_config = ConfigDict(extra="forbid")

    query: str = ""
    kind: Kind | None = None
    time_from: datetime | None = None
    time_to: datetime | None = None
    max_results: Annotated[int, Field(ge=1, le=MAX_RESULTS_LIMIT)] = 10
    similarity_threshold: Annotated[float, Field(ge=-1.0, le=1.0)] = 0.3
    order_by_event_time: bool = False
    deduplicate: bool = False
    kind_fallback: bool = True
    hybrid: bool = True
    # Fusion knobs: None takes the service's default (memcore.search.SearchDefaults, settings ``service.*``).
    rrf_k: Annotated[int, Field(ge=1, le=10_000)] | None = None
    dense_weight: Annotated[float, Field(ge=0, le=100)] | None = None
    keyword_weight: Annotated[float, Field(ge=0, le=100)] | None = None
    keyword_query: Literal["raw", "content"] | None = None
    date_boost: bool | None = None
    merge_overlapping: bool | None = None
    metadata_filter: dict[str, Scalar] | None = None
    """Only entries whose metadata has every ``key: value`` (equality, AND); see :mod:`memcore.metadata`."""

    @field_validator("metadata_filter", mode="before")
    @classmethod
    def _metadata_filter(cls, v: Any) -> dict[str, Scalar] | None:
        return check_filter(v)

    @field_validator("time_from", "time_to")
    @classmethod
    def _times(cls, v: datetime | None) -> datetime | None:
        return utc(v) if v is not None else None

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        if len(v.encode("utf-8")) > MAX_TEXT_BYTES:
            raise ValueError(f"query is longer than {MAX_TEXT_BYTES} bytes")
        return v

    @model_validator(mode="after")
    def _range(self) -> SearchOptions:
        if self.time_from and self.time_to and self.time_from > self.time_to:
            raise ValueError("time_from is after time_to")
        return self


class SearchHit(BaseModel):
    entry: Entry
    score: float
    merged: list[str] = Field(default_factory=list)
    """Ids of further entries this hit's text includes (``merge_overlapping``); empty otherwise."""


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
