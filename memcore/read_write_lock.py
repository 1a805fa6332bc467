"""A read-write lock for threads: many holders of the shared side at once, or one of the exclusive side.

A writer that asks waits for the readers in flight and holds back readers that arrive after it (so a steady
stream of readers never starves it); it is not reentrant, and the exclusive side is never taken from inside
the shared one. Optional hooks run, under the lock, when the shared side goes from free to held
(``on_first_shared``; if it raises, the reader does not get in) and back (``on_last_shared``). Users: the
vector store's tier switch (:mod:`memcore.stores.edge_tiers`), the shard's serving-service swap at a
compaction (:class:`actors.current.CurrentService`) and the shard's writes gate, whose shared side is the
writes and whose hooks keep the keyword index's dirty mark (:class:`actors.write_gate.WriteGate`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Many holders of :meth:`shared`, or one of :meth:`exclusive`."""

    def __init__(self, *, on_first_shared: Callable[[], None] | None = None,
                 on_last_shared: Callable[[], None] | None = None) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._on_first, self._on_last = on_first_shared, on_last_shared

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            if not self._readers and self._on_first is not None:
                self._on_first()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    if self._on_last is not None:
                        self._on_last()
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
