"""How Mem0's data model maps onto memcluster's (pure functions; the routes are :mod:`serve_apps.mem0.api`).

- The API key selects the memcluster app; Mem0's ``user_id`` is the memcluster user. An id with ``/``
  (or one holding ``~0`` / ``~1``) is written with ``~`` as ``~0`` and ``/`` as ``~1`` (RFC 6901's
  escapes; :func:`member`): trpc-agent-py's ``app_name/user_id`` (seed 002's ``save_key``) is the
  memcluster user ``app_name~1user_id``, which a URL carries unchanged; every other id (``a~b``
  included) is the same text in both APIs. Mem0 ids (user, agent, run, app)
  follow memcluster's identifier rule once escaped: 1..128 characters, no control or format characters,
  no outer whitespace, not ``.`` / ``..`` or a percent-encoded form (``memclient.segments``).
- ``agent_id``, ``run_id`` and ``app_id`` are kept in the entry's metadata under the reserved keys
  :data:`AGENT`, :data:`RUN` and :data:`APP`; the caller's own ``metadata`` sits beside them. Keys
  starting with :data:`PREFIX` are reserved: a caller's key with that prefix is refused (422 naming
  ``metadata.<key>``), and they are never returned inside ``metadata``.
- Scopes: in Mem0 a memory is unique within its (user, agent, run, app) scope. A memory without agent,
  run or app is content-addressed as any memcluster entry; one with a scope carries the caller key
  :func:`scope_key` (a digest of the scope and the content), so its id is derived from both: the same
  text for ``agent_id="chef"`` and for ``agent_id="travel"`` is two memories, and an update or delete
  of one never touches the other. An entry has a scope exactly when it carries such a key.
- A Mem0 memory id is ``<memcluster id>.<base64url of the Mem0 user id>``: Mem0's get, update, delete
  and history carry no user, and memcluster scopes every read by user.
- An update that changes the text rotates the memcluster id (content addressing); the new entry keeps
  the previous id under :data:`PREV`, and the retired one stays as a tombstone (soft delete, the
  default), so :func:`history` can walk the trail: ADD, then one UPDATE per rotation or in-place
  change, then DELETE when the newest is a tombstone.
- Filters (``filters`` of search and list) are Mem0's v2 filters: :mod:`serve_apps.mem0.filters`.
- ``score`` of a search result is the hit's relevance (:mod:`memcore.relevance`) clamped to 0..1
  (:func:`score_of`); ``threshold`` keeps results with a score at least that. ``timestamp`` on add and
  update is the memory's ``created_at`` / ``updated_at`` (:func:`timestamp_of`).
- ``expiration_date`` (Mem0: a ``YYYY-MM-DD`` date, UTC, inclusive) is memcluster's ``expires_at`` at
  00:00 UTC of the next day (:func:`expiry_of`); a memory shows the last day it is visible on
  (:func:`expiration_date`; null: it never expires). Unlike Mem0, which hides expired memories but keeps
  them (``get`` still returns them), an expired memcluster entry is returned by no read and deleted by
  the maintenance sweep.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from memcore.errors import NotFoundError, ValidationError
from memcore.fields import check_identifier
from memcore.model import Entry, UserKey
from memcore.text import normalize
from memcore.validation import make_key

PREFIX = "mem0_"
AGENT, RUN, APP, PREV = "mem0_agent_id", "mem0_run_id", "mem0_app_id", "mem0_prev_id"
FEEDBACK, FEEDBACK_REASON = "mem0_feedback", "mem0_feedback_reason"
ENTITY_KEYS: dict[str, str] = {"agent_id": AGENT, "run_id": RUN, "app_id": APP}
ENTITY_TYPES: dict[str, str] = {"user": "user_id", "agent": "agent_id", "run": "run_id", "app": "app_id"}
DEFAULT_SESSION = "mem0"
EXPIRATION = "expiration_date"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# ----------------------------------------------------------------- ids
def escaped(text: str) -> bool:
    """Whether a memcluster id is an escaped Mem0 id: it holds ``~0`` or ``~1``, which no id left as it
    was holds."""
    return "~0" in text or "~1" in text


def user_key(app: str, user: str) -> UserKey:
    """The memcluster scope of a Mem0 user id (:func:`member`: 422 naming ``user_id``)."""
    return make_key(app, member(user))


def member(value: Any, field: str = "user_id") -> str:
    """The memcluster id of a Mem0 id, checked by the identifier rule (a bad one is 422 naming ``field``):
    the id itself, unless it holds ``/`` or is :func:`escaped` already; then ``~`` → ``~0``, ``/`` → ``~1``.
    Ids stored before escaping existed (``a~b``) keep their memcluster id."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    mapped = value.replace("~", "~0").replace("/", "~1") if "/" in value or escaped(value) else value
    try:
        return check_identifier(mapped, field)
    except ValueError as exc:
        raise ValidationError(str(exc), field=field) from None


def mem0_user(user: str) -> str:
    """The Mem0 ``user_id`` of a memcluster user (the inverse of :func:`member`)."""
    return user.replace("~1", "/").replace("~0", "~") if escaped(user) else user


def scope_of(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The Mem0 scope (agent, run, app: their reserved keys) that an entry's or a request's metadata names."""
    return {k: metadata[k] for k in ENTITY_KEYS.values() if metadata.get(k) is not None}


def scope_key(scope: Mapping[str, Any], text: str, *, kind: str = "fact", event_time: str | None = None,
              participants: Sequence[str] = (), location: str | None = None) -> str | None:
    """The caller key of a memory in ``scope`` (None without one): a digest of the scope and the content
    (normalised text and episodic metadata, as memcluster's content address), so the id depends on both."""
    if not scope:
        return None
    canonical = {"v": 1, "scope": {k: scope[k] for k in sorted(scope)}, "text": normalize(text), "kind": kind,
                 "event_time": event_time or "", "participants": sorted({normalize(p) for p in participants}),
                 "location": normalize(location or "")}
    blob = json.dumps(canonical, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return f"{PREFIX}scope:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


def entry_scope_key(entry: Entry, scope: Mapping[str, Any], text: str | None = None) -> str | None:
    """:func:`scope_key` of ``entry``'s content (``text`` instead of its own when given) in ``scope``."""
    return scope_key(scope, entry.text if text is None else text, kind=entry.kind.value,
                     event_time=entry.event_time.isoformat() if entry.event_time else None,
                     participants=entry.participants, location=entry.location)


def mem0_id(user: str, entry_id: str) -> str:
    tag = base64.urlsafe_b64encode(user.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{entry_id}.{tag}"


def split_id(value: str) -> tuple[str, str]:
    """``(Mem0 user, memcluster id)`` of a Mem0 memory id; an unreadable one is 404 (no such memory)."""
    entry_id, sep, tag = value.partition(".")
    if not sep or not entry_id or not tag:
        raise NotFoundError(f"memory {value!r} not found", field="memory_id")
    try:
        user = base64.urlsafe_b64decode(tag + "=" * (-len(tag) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        raise NotFoundError(f"memory {value!r} not found", field="memory_id") from None
    return user, entry_id


# ----------------------------------------------------------------- expiry
def expiry_of(value: Any, now: datetime) -> datetime | None:
    """``expires_at`` of a Mem0 ``expiration_date`` (None: no expiry): 00:00 UTC after that day. A value
    that is not a ``YYYY-MM-DD`` date, or a day already over at ``now``, is refused naming the field."""
    if value is None:
        return None
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise ValidationError(f"{EXPIRATION} must be a date YYYY-MM-DD (UTC) or null", field=EXPIRATION)
    try:
        at = datetime.combine(date.fromisoformat(value) + timedelta(days=1), time(0), tzinfo=UTC)
    except (ValueError, OverflowError):
        raise ValidationError(f"{EXPIRATION} {value!r} is not a valid date", field=EXPIRATION) from None
    if at <= now:
        raise ValidationError(f"{EXPIRATION} {value} is in the past", field=EXPIRATION)
    return at


def expiration_date(entry: Entry) -> str | None:
    """The last day (UTC) on which ``entry`` is visible, as Mem0's ``expiration_date``; None: never expires."""
    if entry.expires_at is None:
        return None
    return (entry.expires_at - timedelta(microseconds=1)).date().isoformat()


# ----------------------------------------------------------------- timestamps
TIMESTAMP = "timestamp"


def timestamp_of(value: Any, now: datetime, field: str = TIMESTAMP) -> datetime | None:
    """The instant of a Mem0 ``timestamp`` (Unix seconds, or an ISO-8601 date-time; naive: UTC); None when
    not given. One after ``now`` is refused naming the field (a memory is not created in the future)."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(value)
        if isinstance(value, str):
            at = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
            at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        else:
            at = datetime.fromtimestamp(value, tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise ValidationError(f"{field} must be Unix seconds or an ISO-8601 date-time", field=field) from None
    if at > now:
        raise ValidationError(f"{field} {value!r} is in the future", field=field)
    return at


def score_of(relevance: float | None) -> float:
    """Mem0's ``score`` of a hit: its relevance (:mod:`memcore.relevance`: the query/memory cosine less the
    name penalty) clamped to 0..1, the scale of Mem0's ``threshold``."""
    return min(1.0, max(0.0, relevance if relevance is not None else 0.0))


# ----------------------------------------------------------------- metadata
def user_metadata(value: Any, field: str = "metadata") -> dict[str, Any]:
    """The caller's ``metadata`` (None: empty), with no reserved key."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata must be a JSON object", field=field)
    for key in value:
        if isinstance(key, str) and key.startswith(PREFIX):
            raise ValidationError(f"metadata keys starting with {PREFIX!r} are reserved", field=f"{field}.{key}")
    return dict(value)


def entry_metadata(metadata: Mapping[str, Any], entities: Mapping[str, Any], prev: str | None = None) -> dict[str, Any]:
    """What is stored: the caller's metadata plus the entity ids (agent/run/app) and the previous id."""
    out = dict(metadata)
    for name, key in ENTITY_KEYS.items():
        value = entities.get(name)
        if value is not None:
            out[key] = entity_value(value, name)
    if prev is not None:
        out[PREV] = prev
    return out


def reserved(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k.startswith(PREFIX)}


def entity_value(value: Any, field: str) -> str:
    """A Mem0 agent, run or app id (stored as given), checked as :func:`member` checks a user id."""
    member(value, field)
    return str(value)


def to_mem0(entry: Entry, score: float | None = None) -> dict[str, Any]:
    """A memory as Mem0's API returns it."""
    meta = {k: v for k, v in entry.metadata.items() if not k.startswith(PREFIX)}
    out: dict[str, Any] = {
        "id": mem0_id(mem0_user(entry.user), entry.id), "memory": entry.text, "user_id": mem0_user(entry.user),
        "agent_id": entry.metadata.get(AGENT), "run_id": entry.metadata.get(RUN), "app_id": entry.metadata.get(APP),
        "metadata": meta or None, "categories": list(entry.topics), "immutable": False,
        EXPIRATION: expiration_date(entry),
        "created_at": _iso(entry.created_at), "updated_at": _iso(entry.updated_at),
    }
    if score is not None:
        out["score"] = score
    return out


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


# ----------------------------------------------------------------- history
def history(entries: Sequence[Entry], entry_id: str) -> list[dict[str, Any]]:
    """The Mem0 history of the memory ``entry_id`` among ``entries`` (one user's, tombstones included)."""
    by_id = {e.id: e for e in entries}
    if entry_id not in by_id:
        raise NotFoundError(f"memory {entry_id!r} not found", field="memory_id")
    successor = {str(e.metadata[PREV]): e.id for e in entries if isinstance(e.metadata.get(PREV), str)}
    newest = entry_id
    seen = {newest}
    while newest in successor and successor[newest] not in seen:
        newest = successor[newest]
        seen.add(newest)
    chain = [by_id[newest]]
    while isinstance(prev := chain[-1].metadata.get(PREV), str) and prev in by_id and by_id[prev] not in chain:
        chain.append(by_id[prev])
    chain.reverse()
    first = chain[0]
    events = [_event(first, "ADD", None, first.text, first.created_at)]
    for old, new in itertools.pairwise(chain):
        events.append(_event(new, "UPDATE", old.text, new.text, old.deleted_at or new.updated_at))
    last = chain[-1]
    if last.deleted_at is not None:
        events.append(_event(last, "DELETE", last.text, None, last.deleted_at))
    return events


def _event(entry: Entry, kind: str, old: str | None, new: str | None, at: datetime) -> dict[str, Any]:
    mid = mem0_id(mem0_user(entry.user), entry.id)
    return {"id": f"{mid}:{kind.lower()}:{at.timestamp():.6f}", "memory_id": mid, "event": kind,
            "old_memory": old, "new_memory": new, "user_id": mem0_user(entry.user),
            "agent_id": entry.metadata.get(AGENT), "run_id": entry.metadata.get(RUN),
            "categories": list(entry.topics), "input": [],
            "created_at": _iso(at), "updated_at": _iso(at)}
