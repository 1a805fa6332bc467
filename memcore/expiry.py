"""When a stored entry has expired: the one rule every read and the TTL sweep share.

An entry is expired at ``now`` when its own ``expires_at`` has passed (:meth:`memcore.model.Entry.expired`,
a write's ``ttl_s`` or ``expires_at``), or when its app has a lifetime (``ttl.apps``) and the entry's last
write (``updated_at``; a tombstone's: its deletion) is older than that lifetime. With
``ttl.refresh_on_access`` an active entry's last recorded read counts as well: it expires a lifetime after
the later of the two (reads are recorded in the archive's access table, handed in as ``last_read``).

Reads filter with :meth:`Expiry.live` (an expired entry is gone from every read at once, not one sweep
later: search, list, get, preload, export, history), and the shard's maintenance thread removes for good
what :meth:`Expiry.due` says (``actors.maintenance``). The same holds for the app's knowledge graph and
diary: :class:`ExpiringGraph` and :class:`ExpiringDiary` leave out of every read the fact lines whose newest
version, and the diary entries, older than the lifetime (what the sweep deletes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from memcore.archive_ports import DiaryRepository, GraphRepository
from memcore.fields import now_utc
from memcore.graph import DiaryEntry, Direction, Entity, Fact
from memcore.model import Entry, UserKey
from memcore.settings import TTLSettings

LastRead = Callable[[UserKey], Mapping[str, float]]
"""A user's entry id → epoch seconds of its last recorded read
(:meth:`memcore.archive_ports.AccessRepository.last_access`)."""


class Expiry:
    def __init__(self, ttl: TTLSettings | None = None, last_read: LastRead | None = None) -> None:
        self.ttl = ttl or TTLSettings()
        self._last_read = last_read

    def lifetime(self, app: str) -> float | None:
        """The app's lifetime in seconds (``ttl.apps``), or None."""
        return self.ttl.ttl_of(app)

    def alive_since(self, app: str, now: datetime) -> datetime | None:
        """The oldest time a record of the app written then (an archived turn's timestamp) is still alive at
        ``now``; None: the app has no lifetime."""
        life = self.lifetime(app)
        return None if life is None else now - timedelta(seconds=life)

    def counts_reads(self, app: str) -> bool:
        """Whether a read of this app's entries extends their life (refresh on access, the app has a lifetime)."""
        return self.ttl.refresh_on_access and self.lifetime(app) is not None

    def seen(self, key: UserKey) -> Mapping[str, float]:
        """The user's last reads that count for :meth:`due` (empty when reads do not count or are unknown)."""
        if self._last_read is None or not self.counts_reads(key.app):
            return {}
        return self._last_read(key)

    def due(self, entry: Entry, now: datetime, seen: Mapping[str, float] | None = None) -> bool:
        """Whether ``entry`` has expired at ``now``; ``seen``: the last reads of its user (counted for an
        active entry only: a tombstone's lifetime runs from its deletion)."""
        if entry.expired(now):
            return True
        life = self.lifetime(entry.app)
        if life is None:
            return False
        last = entry.updated_at.timestamp()
        if seen and entry.active:
            last = max(last, seen.get(entry.id, 0.0))
        return last < now.timestamp() - life

    def alive(self, key: UserKey, now: datetime) -> Callable[[Entry], bool]:
        """Whether an entry of ``key`` is alive at ``now`` (the user's last reads fetched once, when they count)."""
        if not self.ttl.apps:
            return lambda e: not e.expired(now)
        reads = self.seen(key)
        return lambda e: not self.due(e, now, reads)

    def live(self, entries: Iterable[Entry], now: datetime) -> list[Entry]:
        """``entries`` without the expired ones (:meth:`alive` once per user). On the search path: without app
        lifetimes it is the per-entry check alone."""
        if not self.ttl.apps:
            return [e for e in entries if not e.expired(now)]
        checks: dict[tuple[str, str], Callable[[Entry], bool]] = {}
        kept = []
        for e in entries:
            scope = (e.app, e.user)
            if scope not in checks:
                checks[scope] = self.alive(e.key, now)
            if checks[scope](e):
                kept.append(e)
        return kept


class ExpiringGraph:
    """A :class:`~memcore.archive_ports.GraphRepository` whose reads leave out the fact lines (every version) whose
    newest version was recorded before the app's lifetime; writes and counts pass through."""

    def __init__(self, inner: GraphRepository, expiry: Expiry, clock: Callable[[], datetime] = now_utc) -> None:
        self._inner, self._expiry, self._clock = inner, expiry, clock

    def _live(self, key: UserKey, facts: list[Fact]) -> list[Fact]:
        since = self._expiry.alive_since(key.app, self._clock())
        if since is None:
            return facts
        newest: dict[str, datetime] = {}
        for f in facts:  # a line's versions share its entities, so every version of a line returned is here
            newest[f.fact_id] = max(newest.get(f.fact_id, f.recorded_at), f.recorded_at)
        return [f for f in facts if newest[f.fact_id] >= since]

    def facts(self, key: UserKey, entities: Sequence[str] | None = None, *, direction: Direction = "both",
              predicate: str | None = None, believed_only: bool = False) -> list[Fact]:
        return self._live(key, self._inner.facts(key, entities, direction=direction, predicate=predicate,
                                                 believed_only=believed_only))

    def lines(self, key: UserKey, fact_ids: Sequence[str]) -> list[Fact]:
        return self._live(key, self._inner.lines(key, fact_ids))

    def entities(self, key: UserKey, keys: Sequence[str] | None = None) -> list[Entity]:
        return self._inner.entities(key, keys)

    def resolve(self, key: UserKey, names: Sequence[str]) -> dict[str, str]:
        return self._inner.resolve(key, names)

    def write(self, key: UserKey, *, at: datetime, retire: Sequence[str] = (), add: Sequence[Fact] = (),
              entities: Sequence[Entity] = (), drop: Sequence[str] = ()) -> int:
        return self._inner.write(key, at=at, retire=retire, add=add, entities=entities, drop=drop)

    def count(self, key: UserKey) -> int:
        return self._inner.count(key)

    def users(self, app: str) -> list[str]:
        return self._inner.users(app)

    def expire(self, app: str, before: datetime) -> int:
        return self._inner.expire(app, before)


class ExpiringDiary:
    """A :class:`~memcore.archive_ports.DiaryRepository` whose reads leave out the entries written before the app's
    lifetime."""

    def __init__(self, inner: DiaryRepository, expiry: Expiry, clock: Callable[[], datetime] = now_utc) -> None:
        self._inner, self._expiry, self._clock = inner, expiry, clock

    def read(self, key: UserKey, agent: str | None, *, limit: int | None, since: datetime | None = None,
             until: datetime | None = None, wing: str | None = None) -> tuple[list[DiaryEntry], int]:
        alive = self._expiry.alive_since(key.app, self._clock())
        if alive is not None and (since is None or since < alive):
            since = alive
        return self._inner.read(key, agent, limit=limit, since=since, until=until, wing=wing)

    def write(self, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
        return self._inner.write(key, entries)

    def expire(self, app: str, before: datetime) -> int:
        return self._inner.expire(app, before)
