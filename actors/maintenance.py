"""Periodic upkeep of one shard: TTL expiry of memories and archived turns, pruning of old job
records, compaction after erasure, and (embedded mode) dedicated HNSW stores for large users
(:mod:`memcore.stores.edge_tiers`: built in another process, then switched to).

TTL: every ``ttl.sweep_s`` the thread scans the shard's entries and removes for good (hard delete)
the entries that are due (:meth:`Maintenance.due`), active ones and tombstones alike (a soft-deleted
entry's text expires too): those past their own ``expires_at`` (a write's ``ttl_s`` or ``expires_at``,
any app) and, for the apps ``ttl.apps`` names, those whose last write (``updated_at``; a tombstone's: its
deletion) is older than the app's lifetime (:class:`memcore.expiry.Expiry`, the rule every read applies
too: until the sweep no read returns them, export included). With
``ttl.refresh_on_access`` a read through get/read/search/preload also counts: the entry
expires a lifetime after the later of its last write and its last read (reads are recorded
in the archive, not in the entry, so ``updated_at`` keeps meaning "last written"). Each
deletion re-checks the entry inside the user's write turn, so a concurrent re-add survives.
The same sweep deletes the knowledge-graph facts (by their newest version's record time) and diary entries
of those apps older than the lifetime, and the archived turns of those apps whose timestamp is older than the
lifetime (except turns an unfinished extraction job has yet to read). When the sweep removed
anything, or an erasure happened since the last compaction, the shard is compacted
(:meth:`actors.shard_erasure.ShardErasure.compact_if_needed`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from actors.context import ShardContext, ShardPart
from memcore.errors import MemoryServiceError
from memcore.model import Entry, UserKey
from memcore.stores.edge_tiers import TieredEdgeStore

log = logging.getLogger(__name__)


class Maintenance(ShardPart):
    def __init__(
        self,
        ctx: ShardContext,
        *,
        compact: Callable[[bool], dict[str, Any] | None] | None = None,
        start: bool = True,
    ) -> None:
        super().__init__(ctx)
        self._compact = compact
        self._stop = threading.Event()
        self.last: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._loop, name=f"shard{self.shard}-maintenance", daemon=True)
        if start:
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.ttl.sweep_s):
            try:
                self.run_once()
            except Exception:
                log.exception("shard %d: maintenance failed", self.shard)

    def run_once(self, now: float | None = None) -> dict[str, Any]:
        """One sweep: expire memories and archived turns, prune finished jobs, compact if anything was
        erased; returns what it did."""
        expired, events = self.expire(now), self.expire_events(now)
        last: dict[str, Any] = {
            "expired": expired, "expired_events": events,
            "pruned_jobs": self.archive.jobs.prune(self.settings.extractor.job_retention_s),
        }
        if self._compact is not None:
            last["compacted"] = self._compact(bool(expired or events)) is not None
        vectors = self.served.get().vectors
        if isinstance(vectors, TieredEdgeStore):  # large users' HNSW stores, built off the shard's process
            last["tiers"] = vectors.maintain()
        self.last = {**last, "at": time.time()}
        return self.last

    def expire_events(self, now: float | None = None) -> int:
        """Delete the archived turns, knowledge-graph facts (by their newest version) and diary entries older
        than their app's lifetime; returns how many rows went."""
        at = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        expiry = self.served.get().expiry
        removed = 0
        for app in self.settings.ttl.apps:
            before = expiry.alive_since(app, at)
            assert before is not None  # the app has a lifetime
            removed += self.archive.events.expire(app, before)
            removed += self.archive.graph.expire(app, before) + self.archive.diary.expire(app, before)
        if removed:
            log.info("shard %d: expired %d archived turns", self.shard, removed)
        return removed

    # ------------------------------------------------------------------ TTL
    def touch(self, key: UserKey, entries: Iterable[Entry]) -> None:
        """Record a read of ``entries`` (only when refresh on access is on and the app has a TTL)."""
        if self.served.get().expiry.counts_reads(key.app):
            self.archive.access.touch(key, [e.id for e in entries])

    def due(self, entry: Entry, now: float, seen: Mapping[str, float] | None = None) -> bool:
        """Whether the sweep deletes ``entry`` at ``now``: the rule every read applies too
        (:meth:`memcore.expiry.Expiry.due`: its own expiry, or its app's lifetime since its last write, or
        read, given ``seen``, with refresh on access)."""
        return self.served.get().expiry.due(entry, datetime.fromtimestamp(now, UTC), seen)

    def expire(self, now: float | None = None) -> int:
        """Hard-delete the expired entries of this shard, tombstones included (per-entry expiry or the app's
        TTL: a tombstone's lifetime runs from its deletion); returns how many."""
        ttl = self.settings.ttl
        now = time.time() if now is None else now
        candidates: dict[UserKey, list[str]] = {}
        stored = self.served.get().vectors.scroll(None, include_deleted=True)
        for e in self.layout.owned(stored):
            if self.due(e, now):
                candidates.setdefault(e.key, []).append(e.id)
        removed = 0
        for key, ids in candidates.items():
            seen = self.archive.access.last_access(key) if ttl.refresh_on_access else {}
            gone: list[str] = []
            with self.ctx.writing(key):
                service = self.served.get()
                for entry in service.vectors.get(key, ids):
                    if not self.due(entry, now, seen):
                        continue  # re-checked in the write turn: a concurrent re-add survives
                    try:
                        service.purge(key, [entry.id])
                    except MemoryServiceError as exc:
                        log.warning("shard %d: expiring %s failed: %s", self.shard, entry.id, exc)
                        continue
                    gone.append(entry.id)
            if gone:
                self.archive.access.forget(key, gone)
                removed += len(gone)
        if removed:
            log.info("shard %d: expired %d memories", self.shard, removed)
        return removed
