"""ShardCore: everything one shard does, as a plain class (the Ray actor wraps it at build time).

- owns all writes of its users through a per-user FIFO kept here (arrival order at the shard,
  not Ray's call order), and is the one writer of its keyword index and vector directory;
- reads run concurrently with writes (the actor is threaded);
- on start it reopens its stores and rebuilds the keyword index from the vector store when it
  is missing or stale (a dirty marker left by an interrupted write, or a count mismatch).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from memcore import factory, preload, tools
from memcore.ids import shard_of
from memcore.model import Entry, InjectionMode, PreloadResult, SearchHit, SearchOptions, UserKey
from memcore.ports import Embedder
from memcore.service import MemoryService
from memcore.settings import Settings
from memcore.tools import ToolMode

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Ack:
    """A write's result plus its position in the user's FIFO (1, 2, 3, ... per shard start)."""

    seq: int
    value: Any


class UserQueues:
    """Per-user FIFO: a write waits for the previous write of the same user, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tails: dict[UserKey, threading.Event] = {}
        self._seq: dict[UserKey, int] = {}

    @contextmanager
    def turn(self, key: UserKey) -> Iterator[int]:
        mine = threading.Event()
        with self._lock:
            prev = self._tails.get(key)
            self._tails[key] = mine
            seq = self._seq.get(key, 0) + 1
            self._seq[key] = seq
        if prev is not None:
            prev.wait()
        try:
            yield seq
        finally:
            mine.set()
            with self._lock:
                if self._tails.get(key) is mine:
                    del self._tails[key]

    def pending(self) -> int:
        with self._lock:
            return len(self._tails)


class ShardCore:
    def __init__(self, settings: Settings, shard: int, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.shard = shard
        self.started_at = time.time()
        self.service: MemoryService = factory.build_service(settings, shard, embedder)
        self._dirty = factory.shard_dir(settings, shard) / "keywords.dirty"
        self._queues = UserQueues()
        self.rebuilt = self._recover()

    # ------------------------------------------------------------ lifecycle
    def _recover(self) -> int | None:
        """Rebuild the keyword index if an interrupted write left it stale; returns docs indexed or None."""
        owned = factory.owned_entries_count(self.service, self.settings, self.shard)
        indexed = self.service.keywords.count()
        if not self._dirty.exists() and owned == indexed:
            return None
        log.warning("shard %d: rebuilding keyword index (dirty=%s, vectors=%d, keywords=%d)",
                    self.shard, self._dirty.exists(), owned, indexed)
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
        }

    def close(self) -> None:
        self.service.vectors.close()
        self.service.keywords.close()

    # --------------------------------------------------------------- writes
    def _write(self, key: UserKey, fn: Callable[[], T]) -> Ack:
        with self._queues.turn(key) as seq:
            Path(self._dirty).touch()
            value = fn()
            self._dirty.unlink(missing_ok=True)
            return Ack(seq=seq, value=value)

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

    # ---------------------------------------------------------------- reads
    def get(self, key: UserKey, entry_id: str) -> Entry:
        return self.service.get(key, entry_id)

    def read(self, key: UserKey, limit: int | None = None) -> list[Entry]:
        return self.service.read(key, limit)

    def search(self, key: UserKey, options: SearchOptions | dict[str, Any]) -> list[SearchHit]:
        return self.service.search(key, options)

    def preload(
        self, key: UserKey, budget: int, message: str, mode: InjectionMode, playbook: str | None
    ) -> PreloadResult:
        return preload.preload(self.service, key, budget, message, mode=mode, playbook=playbook)

    def ping(self) -> int:
        return self.shard
