"""The one owner of a shard's current :class:`MemoryService`.

Re-extraction swaps the service a shard serves from (a new generation) while every write is held
at the shard's writes gate; everything else in the shard (the API calls, the extraction jobs, the
maintenance thread, the generation bookkeeping) holds this object and asks it for the service at
each use, so nobody keeps a stale one.

A compaction closes the serving service's stores, swaps fresh ones in and opens them again. Reads take
the service with :meth:`CurrentService.reading`, and the compaction holds :meth:`CurrentService.closing`
over that window: it waits for the reads in flight, and reads that arrive meanwhile wait for the reopened
service instead of failing on a closed store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memcore.read_write_lock import ReadWriteLock
from memcore.service import MemoryService


class CurrentService:
    """The service a shard serves from now; :meth:`replace` is called with the writes gate closed."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service
        self._lock = threading.Lock()
        self._rw = ReadWriteLock()

    def get(self) -> MemoryService:
        with self._lock:
            return self._service

    def replace(self, service: MemoryService) -> MemoryService:
        """Serve from ``service`` from now on; returns the one it replaces."""
        with self._lock:
            old, self._service = self._service, service
            return old

    @contextmanager
    def reading(self) -> Iterator[MemoryService]:
        """The current service, kept open for the block (a compaction's :meth:`closing` waits for it)."""
        with self._rw.shared():
            yield self.get()

    @contextmanager
    def closing(self) -> Iterator[None]:
        """Exclusive use of the serving service (to close and replace it): waits for the reads in flight,
        holds new ones until the block ends (no reader starves the compaction). Not reentrant, and never
        taken inside :meth:`reading`."""
        with self._rw.exclusive():
            yield
