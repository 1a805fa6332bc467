"""ShardCore: everything one shard does, as a plain class (the Ray actor wraps it at build time).

- owns all writes of its users through a per-user FIFO kept here (arrival order at the shard,
  not Ray's call order), and is the one writer of its keyword index and vector directory;
- reads run concurrently with writes (the actor is threaded);
- on start it reopens its stores and rebuilds the keyword index from the vector store when it
  is missing or stale (a dirty marker left by an interrupted write, or a count mismatch);
- auto memory: ``ingest`` archives session turns and queues extraction jobs run by worker
  threads in per-user order (:mod:`actors.extraction_queue`); ``job`` and ``recall`` read the
  shard's SQLite archive (:mod:`actors.archive`); jobs left unfinished by a dead shard are
  re-queued on start;
- a maintenance thread expires memories of apps with a TTL (:mod:`actors.maintenance`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from actors.archive import JobRecord, RecallHit, SqliteArchive
from actors.extraction_queue import ExtractionJobs
from actors.maintenance import Maintenance
from actors.queues import Ticket, UserQueues
from memcore import factory, preload, tools
from memcore.errors import ValidationError
from memcore.ids import shard_of
from memcore.model import Entry, InjectionMode, PreloadResult, SearchHit, SearchOptions, UserKey
from memcore.ports import Embedder, Extractor
from memcore.service import MemoryService
from memcore.settings import Settings
from memcore.tools import ToolMode

__all__ = ["Ack", "ShardCore", "Ticket", "UserQueues"]
MAX_RECALL_RESULTS = 100

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Ack:
    """A write's result plus its position in the user's FIFO (1, 2, 3, ... per shard start)."""

    seq: int
    value: Any


class ShardCore:
    def __init__(
        self,
        settings: Settings,
        shard: int,
        embedder: Embedder | None = None,
        *,
        extractor: Extractor | None = None,
        start_workers: bool = True,
    ) -> None:
        self.settings = settings
        self.shard = shard
        self.started_at = time.time()
        self.service: MemoryService = factory.build_service(settings, shard, embedder)
        self._dirty = factory.shard_dir(settings, shard) / "keywords.dirty"
        self._writers = 0
        self._dirty_lock = threading.Lock()
        self._queues = UserQueues()
        self.rebuilt = self._recover()
        self.archive = SqliteArchive(factory.shard_dir(settings, shard) / "archive.sqlite3")
        self.jobs = ExtractionJobs(self.service, self.archive, settings, shard, self._writing,
                                   extractor=extractor, start=start_workers)
        self.maintenance = Maintenance(self.service, self.archive, settings, shard, self._writing,
                                       start=start_workers)

    # ------------------------------------------------------------ lifecycle
    def _recover(self) -> int | None:
        """Rebuild the keyword index if an interrupted write left it stale; returns docs indexed or None."""
        owned = factory.owned_entries_count(self.service, self.settings, self.shard)
        indexed = self.service.keywords.count()
        staged = self.service.keywords.needs_rebuild
        if not self._dirty.exists() and not staged and owned == indexed:
            return None
        log.warning("shard %d: rebuilding keyword index (dirty=%s, staged=%s, vectors=%d, keywords=%d)",
                    self.shard, self._dirty.exists(), staged, owned, indexed)
        entries = (
            e
            for e in self.service.vectors.scroll(None, include_deleted=False)
            if self.settings.vector_store.backend == "edge"
            or shard_of(e.key, self.settings.shards) == self.shard
        )
        count = self.service.keywords.rebuild(entries)
        self._dirty.unlink(missing_ok=True)
        return count

    def status(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "pid": os.getpid(),
            "entries": factory.owned_entries_count(self.service, self.settings, self.shard),
            "keyword_docs": self.service.keywords.count(),
            "pending_writes": self._queues.pending(),
            "rebuilt_on_start": self.rebuilt,
            "started_at": self.started_at,
            "extraction": self.jobs.status(),
            "maintenance": self.maintenance.last,
        }

    def close(self) -> None:
        self.maintenance.close()
        self.jobs.close()
        self.archive.close()
        self.service.vectors.close()
        self.service.keywords.close()

    # --------------------------------------------------------------- writes
    @contextmanager
    def _writing(self, key: UserKey) -> Iterator[int]:
        """The user's write turn, with the keyword index marked dirty while any write is under way."""
        with self._queues.turn(key) as seq:
            with self._dirty_lock:
                self._writers += 1
                if self._writers == 1:
                    self._dirty.touch()
            try:
                yield seq
            finally:
                with self._dirty_lock:
                    self._writers -= 1
                    if self._writers == 0:
                        self._dirty.unlink(missing_ok=True)

    def _write(self, key: UserKey, fn: Callable[[], T]) -> Ack:
        with self._writing(key) as seq:
            return Ack(seq=seq, value=fn())

    def add(self, key: UserKey, memory: dict[str, Any]) -> Ack:
        return self._write(key, lambda: self.service.add(key, memory))

    def add_many(self, key: UserKey, memories: list[dict[str, Any]]) -> Ack:
        return self._write(key, lambda: self.service.add_many(key, memories))

    def update(self, key: UserKey, entry_id: str, memory: dict[str, Any]) -> Ack:
        return self._write(key, lambda: self.service.update(key, entry_id, memory))

    def delete(self, key: UserKey, entry_id: str, hard: bool | None = None) -> Ack:
        return self._write(key, lambda: self.service.delete(key, entry_id, hard=hard))

    def clear(self, key: UserKey, hard: bool | None = None) -> Ack:
        return self._write(key, lambda: self.service.clear(key, hard=hard))

    def tool(self, key: UserKey, name: str, arguments: dict[str, Any], mode: ToolMode) -> Any:
        enabled = sorted(self.settings.tools.enabled_tools(mode))
        if name in (tools.SEARCH, tools.LOAD):
            return tools.execute(self.service, key, name, arguments, enabled=enabled)
        return self._write(key, lambda: tools.execute(self.service, key, name, arguments, enabled=enabled))

    # ----------------------------------------------------------- auto memory
    def ingest(self, key: UserKey, session: str, events: list[dict[str, Any]]) -> JobRecord:
        """Archive a session's events and record its extraction job (see :mod:`actors.extraction_queue`)."""
        return self.jobs.ingest(key, session, events)

    def job(self, job_id: str) -> JobRecord:
        return self.jobs.job(job_id)

    def recall(self, key: UserKey, query: str, session: str | None = None, max_results: int = 10) -> list[RecallHit]:
        """Archived turns of ``key``'s sessions other than ``session``, best BM25 match first."""
        if not 1 <= max_results <= MAX_RECALL_RESULTS:
            raise ValidationError(f"max_results must be 1..{MAX_RECALL_RESULTS}", field="max_results")
        return self.archive.search(key, query, exclude_session=session, limit=max_results)

    # ---------------------------------------------------------------- reads
    def get(self, key: UserKey, entry_id: str) -> Entry:
        entry = self.service.get(key, entry_id)
        self.maintenance.touch(key, [entry])
        return entry

    def read(self, key: UserKey, limit: int | None = None) -> list[Entry]:
        entries = self.service.read(key, limit)
        self.maintenance.touch(key, entries)
        return entries

    def search(self, key: UserKey, options: SearchOptions | dict[str, Any]) -> list[SearchHit]:
        hits = self.service.search(key, options)
        self.maintenance.touch(key, [h.entry for h in hits])
        return hits

    def preload(
        self, key: UserKey, budget: int, message: str, mode: InjectionMode, playbook: str | None
    ) -> PreloadResult:
        result = preload.preload(self.service, key, budget, message, mode=mode, playbook=playbook)
        self.maintenance.touch(key, result.entries)
        return result

    def ping(self) -> int:
        return self.shard
