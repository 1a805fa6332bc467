"""The domain model: who a memory belongs to and what it says (searches: :mod:`memcore.search_model`).

Field types and their limits: :mod:`memcore.fields`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core.core_schema import ValidationInfo

from memcore.fields import (
    AppId,
    EventTime,
    ItemKey,
    Location,
    Metadata,
    Participants,
    Provenance,
    SessionId,
    Text,
    Topics,
    TtlSeconds,
    UserId,
)
from memcore.metadata import check_metadata


class Kind(StrEnum):
    FACT = "fact"
    EPISODE = "episode"


class Source(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class UserKey(BaseModel):
    """The hard scope of every read and write."""

    model_config = ConfigDict(frozen=True)

    app: AppId
    user: UserId


class SessionRef(BaseModel):
    """A session id on its own (validated as :data:`SessionId`)."""

    model_config = ConfigDict(frozen=True)

    session: SessionId


def _metadata_or_none(v: Any) -> dict[str, Any] | None:
    return None if v is None else check_metadata(v)





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


PreloadStrategy = Literal["off", "all", "search", "recent", "failed", "none"]
"""How preload chose (:mod:`memcore.preload`); ``none``: nothing met the relevance floor."""


class PreloadResult(BaseModel):
    entries: list[Entry]
    text: str
    mode: InjectionMode
    strategy: PreloadStrategy
    cut: dict[str, list[str]] = Field(default_factory=dict)
    """Entry id → the turn ids left out of its text to fit ``max_tokens``; only entries that were cut."""
