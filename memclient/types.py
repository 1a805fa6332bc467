"""Typed results: plain dataclasses built from the service's JSON (unknown fields are ignored)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

UNFINISHED: tuple[str, ...] = ("queued", "running")
"""Job statuses of a job still to run or running; any other status is final (done, partial, failed, skipped)."""


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string from the service (``Z`` or an offset) as an aware datetime; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _req_time(value: Any, name: str) -> datetime:
    t = parse_time(value)
    if t is None:
        raise ValueError(f"entry field {name} is missing")
    return t


@dataclass(frozen=True)
class Entry:
    """A stored memory. ``kind`` is ``fact`` or ``episode``; ``source`` is ``user`` or ``assistant``."""

    id: str
    app: str
    user: str
    text: str
    created_at: datetime
    updated_at: datetime
    topics: list[str] = field(default_factory=list)
    kind: str = "fact"
    event_time: datetime | None = None
    participants: list[str] = field(default_factory=list)
    location: str | None = None
    source: str = "user"
    provenance: list[str] = field(default_factory=list)
    deleted_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    """The caller's key, when the memory was written with one (same key -> same memory, replaced)."""
    expires_at: datetime | None = None
    """When the memory expires (the ``ttl_s`` of the add that wrote it); None: never."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        return cls(
            id=str(data["id"]),
            app=str(data["app"]),
            user=str(data["user"]),
            text=str(data["text"]),
            created_at=_req_time(data.get("created_at"), "created_at"),
            updated_at=_req_time(data.get("updated_at"), "updated_at"),
            topics=list(data.get("topics") or []),
            kind=str(data.get("kind") or "fact"),
            event_time=parse_time(data.get("event_time")),
            participants=list(data.get("participants") or []),
            location=data.get("location"),
            source=str(data.get("source") or "user"),
            provenance=list(data.get("provenance") or []),
            deleted_at=parse_time(data.get("deleted_at")),
            metadata=dict(data.get("metadata") or {}),
            key=data.get("key"),
            expires_at=parse_time(data.get("expires_at")),
        )

    @property
    def active(self) -> bool:
        return self.deleted_at is None


@dataclass(frozen=True)
class SearchHit:
    """One ranked hit; ``merged`` names the ids of verbatim windows folded into it (they shared turns)."""

    entry: Entry
    score: float
    merged: tuple[str, ...] = ()
    cut: tuple[str, ...] = ()
    """Turn refs (``<session>/<event_id>``) left out of the text to fit ``max_tokens`` (the provenance holds the
    turns kept)."""
    relevance: float | None = None
    """How well the memory matches the query: the cosine of their vectors, -1..1 (what ``similarity_threshold``
    filters on); None from a server that does not send it."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchHit:
        rel = data.get("relevance")
        return cls(entry=Entry.from_json(data["entry"]), score=float(data["score"]),
                   merged=tuple(data.get("merged") or ()), cut=tuple(data.get("cut") or ()),
                   relevance=None if rel is None else float(rel))


class SearchResults(list[SearchHit]):
    """A search's hits (a list, best first) and, when the search asked ``include_facts``, ``facts``: the
    current knowledge-graph facts of the entities the query names (the server's JSON objects)."""

    def __init__(self, hits: Iterable[SearchHit] = (), facts: Iterable[dict[str, Any]] = ()) -> None:
        super().__init__(hits)
        self.facts: list[dict[str, Any]] = list(facts)


@dataclass(frozen=True)
class PreloadResult:
    """The chosen entries, the rendered memory block (empty when nothing is injected), the
    injection mode (``system`` | ``user``) and how the entries were chosen
    (``off`` | ``all`` | ``search`` | ``recent`` | ``failed``)."""

    entries: list[Entry]
    text: str
    mode: str
    strategy: str
    cut: dict[str, list[str]] = field(default_factory=dict)
    """Entry id → the turn ids left out of its text to fit ``max_tokens``."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreloadResult:
        return cls(
            entries=[Entry.from_json(e) for e in data.get("entries") or []],
            text=str(data.get("text") or ""),
            mode=str(data.get("mode") or "system"),
            strategy=str(data.get("strategy") or "off"),
            cut={str(k): [str(t) for t in v] for k, v in (data.get("cut") or {}).items()},
        )


@dataclass(frozen=True)
class Job:
    """An ingest job (auto memory): ``status`` is queued | running | done | partial | failed | skipped
    (``partial``: extracted, but some operations failed; :attr:`failed_operations` lists them); the rest
    of the server's answer (``operations``: per-operation results, ``errors``, ``reason``,
    ``cursor``: the session's last_extract_at, ...) is kept in ``data``."""

    job_id: str
    status: str
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        job_id = data.get("job_id", data.get("id"))
        return cls(job_id=str(job_id), status=str(data.get("status") or ""), data=dict(data))

    @property
    def finished(self) -> bool:
        """Anything but queued or running (a state a newer server adds counts as finished)."""
        return self.status not in UNFINISHED

    @property
    def failed_operations(self) -> list[dict[str, Any]]:
        """The per-operation results whose status is ``failed`` (index, type, error, ...)."""
        return [op for op in self.data.get("operations") or [] if op.get("status") == "failed"]
