"""What both Qdrant adapters share: scope filters, payload <-> Entry, point ids, paging.

The filter is built here once as an engine-neutral :class:`FilterSpec`; each adapter only
translates it into its engine's filter classes (``qdrant_edge`` or ``qdrant_client.models``).
The scope (app AND user) is always part of it when a key is given: it is a hard filter,
never a relevance hint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from memcore.errors import MemoryServiceError, StoreError
from memcore.fields import utc
from memcore.ids import point_id
from memcore.model import Entry, Kind, UserKey
from memcore.search_model import TopicsMatch

#: Payload fields with an index, and the index type each one gets.
INDEXED_FIELDS: dict[str, Literal["keyword", "float", "bool"]] = {
    "app": "keyword",
    "user": "keyword",
    "kind": "keyword",
    "event_ts": "float",
    "deleted": "bool",
    "topics": "keyword",
}
#: The field that separates tenants (one user's points are searched together).
TENANT_FIELD = "user"
#: Points fetched per page when scrolling.
SCROLL_PAGE = 256

Offset = TypeVar("Offset")


@dataclass(frozen=True)
class Range:
    """An inclusive numeric range on a payload field; ``None`` is an open end."""

    field: str
    gte: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class FilterSpec:
    """Conditions that must all hold: exact matches, "any of" matches (the field, or one of its
    array values, equals one of the values), ranges, optionally a point-id set and "active only"
    (not a tombstone: ``deleted`` is false, i.e. ``deleted_at`` is null; each adapter picks the
    condition its engine evaluates correctly and fast). An exact match on an array field holds
    when one of its values is equal."""

    matches: tuple[tuple[str, str], ...] = ()
    any_of: tuple[tuple[str, tuple[str, ...]], ...] = ()
    ranges: tuple[Range, ...] = ()
    point_ids: tuple[str, ...] | None = None
    active_only: bool = False

    @property
    def empty(self) -> bool:
        return (not self.matches and not self.any_of and not self.ranges and self.point_ids is None
                and not self.active_only)


def timestamp(value: datetime) -> float:
    """Seconds since the epoch; naive datetimes are taken as UTC (as the model does)."""
    return utc(value).timestamp()


def scope_filter(
    key: UserKey | None,
    *,
    ids: Sequence[str] | None = None,
    active_only: bool = False,
    kind: Kind | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    metadata: Sequence[tuple[str, str]] = (),
    topics: Sequence[str] = (),
    topics_match: TopicsMatch = "any",
) -> FilterSpec:
    """The filter of every store query: scope, then optional ids, activity, kind, event time,
    metadata equalities (payload paths ``metadata.<key>``) and topics (any or all of them)."""
    matches: list[tuple[str, str]] = []
    if key is not None:
        matches += [("app", key.app), ("user", key.user)]
    if kind is not None:
        matches.append(("kind", Kind(kind).value))
    matches += [(path, value) for path, value in metadata]
    any_of: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if topics and topics_match == "all":
        matches += [("topics", t) for t in unique(list(topics))]
    elif topics:
        any_of = (("topics", tuple(unique(list(topics)))),)
    ranges: tuple[Range, ...] = ()
    if time_from is not None or time_to is not None:
        lo = timestamp(time_from) if time_from is not None else None
        hi = timestamp(time_to) if time_to is not None else None
        ranges = (Range("event_ts", gte=lo, lte=hi),)
    pids = tuple(point_ids(ids)) if ids is not None else None
    return FilterSpec(matches=tuple(matches), any_of=any_of, ranges=ranges, point_ids=pids, active_only=active_only)


def points_filter(key: UserKey, pids: Sequence[str]) -> FilterSpec:
    """The filter of a read by point ids (:func:`memcore.ids.point_id`) within ``key``'s scope."""
    return replace(scope_filter(key), point_ids=tuple(unique(list(pids))))


def unique(ids: Sequence[str]) -> list[str]:
    """``ids`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(ids))


def point_ids(ids: Sequence[str]) -> list[str]:
    """Qdrant point ids (UUID strings) of entry ids, without repeats."""
    return unique([point_id(i) for i in ids])


def to_payload(entry: Entry) -> dict[str, Any]:
    return entry.to_payload()


def from_payload(payload: dict[str, Any] | None) -> Entry:
    if payload is None:
        raise ValueError("a stored point has no payload; the store is not a memcluster store")
    return Entry.from_payload(payload)


def belongs(entry: Entry, key: UserKey) -> bool:
    """Defence in depth: the engine filtered by scope, the entry must agree."""
    return entry.app == key.app and entry.user == key.user


def vector_rows(entries: Sequence[Entry], vectors: npt.NDArray[np.float32], dim: int) -> list[list[float]]:
    """Checks the shape (one row of ``dim`` per entry, finite values) and returns plain lists."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(entries) or arr.shape[1] != dim:
        raise ValueError(f"expected vectors of shape ({len(entries)}, {dim}), got {tuple(arr.shape)}")
    if not np.isfinite(arr).all():
        raise ValueError("vectors contain NaN or infinite values")
    rows: list[list[float]] = arr.tolist()
    return rows


def query_vector(vector: npt.NDArray[np.float32], dim: int) -> list[float]:
    """One query vector (shape ``(dim,)`` or ``(1, dim)``) as a plain list."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    if arr.shape[0] != dim:
        raise ValueError(f"expected a query vector of dimension {dim}, got {arr.shape[0]}")
    if not np.isfinite(arr).all():
        raise ValueError("query vector contains NaN or infinite values")
    rows: list[float] = arr.tolist()
    return rows


def in_request_order(entries: Sequence[Entry], ids: Sequence[str]) -> list[Entry]:
    """Entries ordered as ``ids`` asked for them (unknown ids absent, repeats once)."""
    by_id = {e.id: e for e in entries}
    return [by_id[i] for i in unique(ids) if i in by_id]


def paginate(fetch: Callable[[Offset | None], tuple[list[Entry], Offset | None]]) -> Iterator[Entry]:
    """Follows a scroll cursor: ``fetch(offset)`` returns one page of entries and the next offset."""
    offset: Offset | None = None
    while True:
        page, offset = fetch(offset)
        yield from page
        if offset is None or not page:
            return


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Turns an engine failure (or an unreadable stored payload) into a retryable StoreError."""
    try:
        yield
    except MemoryServiceError:
        raise
    except Exception as exc:
        raise StoreError(f"vector store {what} failed: {exc}") from exc


def check_limit(limit: int) -> int:
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return limit
