"""The one owner of a shard's current :class:`MemoryService`.

Re-extraction swaps the service a shard serves from (a new generation) while every write is held
at the shard's writes gate; everything else in the shard (the API calls, the extraction jobs, the
maintenance thread, the generation bookkeeping) holds this object and asks it for the service at
each use, so nobody keeps a stale one.
"""

from __future__ import annotations

import threading

from memcore.service import MemoryService


class CurrentService:
    """The service a shard serves from now; :meth:`replace` is called with the writes gate closed."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service
        self._lock = threading.Lock()

    def get(self) -> MemoryService:
        with self._lock:
            return self._service

    def replace(self, service: MemoryService) -> MemoryService:
        """Serve from ``service`` from now on; returns the one it replaces."""
        with self._lock:
            old, self._service = self._service, service
            return old
