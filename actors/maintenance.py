"""Periodic upkeep of one shard: TTL expiry of memories and pruning of old job records.

TTL (``settings.ttl``, off unless ``ttl.apps`` names an app): every ``ttl.sweep_s`` the thread
scans the shard's entries and removes for good (hard delete) the active entries of those apps
whose last write (``updated_at``) is older than the app's lifetime. With
``ttl.refresh_on_access`` a read through get/read/search/preload also counts: the entry
expires a lifetime after the later of its last write and its last read (reads are recorded
in the archive, not in the entry, so ``updated_at`` keeps meaning "last written"). Each
deletion re-checks the entry inside the user's write turn, so a concurrent re-add survives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from actors.archive import SqliteArchive
from actors.current import CurrentService
from actors.extraction_queue import Writing
from memcore import layout
from memcore.errors import MemoryServiceError
from memcore.model import Entry, UserKey
from memcore.settings import Settings

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(
        self,
        current: CurrentService,
        archive: SqliteArchive,
        settings: Settings,
        shard: int,
        writing: Writing,
        *,
        start: bool = True,
    ) -> None:
        self.current = current
        self.archive = archive
        self.settings = settings
        self.shard = shard
        self._writing = writing
        self._stop = threading.Event()
        self.last: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._loop, name=f"shard{shard}-maintenance", daemon=True)
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
        """One sweep: expire memories, prune finished jobs; returns what it did."""
        self.last = {
            "expired": self.expire(now),
            "pruned_jobs": self.archive.prune_jobs(self.settings.extractor.job_retention_s),
            "at": time.time(),
        }
        return self.last

    # ------------------------------------------------------------------ TTL
    def touch(self, key: UserKey, entries: Iterable[Entry]) -> None:
        """Record a read of ``entries`` (only when refresh on access is on and the app has a TTL)."""
        ttl = self.settings.ttl
        if ttl.refresh_on_access and ttl.ttl_of(key.app) is not None:
            self.archive.touch(key, [e.id for e in entries])

    def expire(self, now: float | None = None) -> int:
        """Hard-delete the expired entries of this shard; returns how many."""
        ttl = self.settings.ttl
        if not ttl.apps:
            return 0
        now = time.time() if now is None else now
        candidates: dict[UserKey, list[str]] = {}
        stored = self.current.get().vectors.scroll(None, include_deleted=False)
        for e in layout.owned(self.settings, self.shard, stored):
            life = ttl.ttl_of(e.app)
            if life is None or e.updated_at.timestamp() >= now - life:
                continue
            candidates.setdefault(e.key, []).append(e.id)
        removed = 0
        for key, ids in candidates.items():
            life = ttl.ttl_of(key.app) or 0.0
            seen = self.archive.last_access(key) if ttl.refresh_on_access else {}
            gone: list[str] = []
            with self._writing(key):
                for entry in self.current.get().vectors.get(key, ids):
                    last = max(entry.updated_at.timestamp(), seen.get(entry.id, 0.0))
                    if not entry.active or last >= now - life:
                        continue
                    try:
                        self.current.get().delete(key, entry.id, hard=True)
                    except MemoryServiceError as exc:
                        log.warning("shard %d: expiring %s failed: %s", self.shard, entry.id, exc)
                        continue
                    gone.append(entry.id)
            if gone:
                self.archive.forget_access(key, gone)
                removed += len(gone)
        if removed:
            log.info("shard %d: expired %d memories", self.shard, removed)
        return removed
