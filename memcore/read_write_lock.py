"""A read-write lock for threads: many holders of the shared side at once, or one of the exclusive side.

A writer that asks waits for the readers in flight and holds back readers that arrive after it (so a steady
stream of readers never starves it); it is not reentrant, and the exclusive side is never taken from inside
the shared one. Users: the vector store's tier switch (:mod:`memcore.stores.edge_tiers`) and the shard's
serving-service swap at a compaction (:class:`actors.current.CurrentService`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Many holders of :meth:`shared`, or one of :meth:`exclusive`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True  # readers that arrive from here on wait
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
