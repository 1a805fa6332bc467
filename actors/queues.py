"""Per-user FIFO ordering inside a shard (arrival order at the shard, not Ray's call order).

A :class:`Ticket` is a place in a user's line: it is taken (``reserve``) when the work
arrives and waited on (``wait``) when the work is about to run, so the order is fixed at
arrival even when the work runs later on another thread (an extraction job in a worker).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memcore.model import UserKey


class Ticket:
    """A place in one user's line: ``wait()`` for the previous holder, ``done()`` to let the next go."""

    __slots__ = ("_key", "_mine", "_owner", "_prev", "seq")

    def __init__(self, owner: UserQueues, key: UserKey, prev: threading.Event | None, seq: int) -> None:
        self._owner = owner
        self._key = key
        self._prev = prev
        self._mine = threading.Event()
        self.seq = seq

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every earlier ticket of the user is done; False on timeout."""
        return self._prev is None or self._prev.wait(timeout)

    def done(self) -> None:
        if self._mine.is_set():
            return
        self._mine.set()
        self._owner._release(self._key, self._mine)


class UserQueues:
    """Per-user FIFO: a write waits for the previous write of the same user, in arrival order."""

    def __init__(self, counter: Callable[[UserKey], int] | None = None) -> None:
        """``counter`` numbers each user's places (durably, :class:`memcore.archive_ports.SequenceRepository`);
        without one they are counted in memory from 1."""
        self._lock = threading.Lock()
        self._tails: dict[UserKey, threading.Event] = {}
        self._seq: dict[UserKey, int] = {}
        self._counter = counter or self._in_memory

    def _in_memory(self, key: UserKey) -> int:
        seq = self._seq.get(key, 0) + 1
        self._seq[key] = seq
        return seq

    def reserve(self, key: UserKey) -> Ticket:
        """Take the next place in ``key``'s line now (wait on it later)."""
        with self._lock:
            prev = self._tails.get(key)
            seq = self._counter(key)
            ticket = Ticket(self, key, prev, seq)
            self._tails[key] = ticket._mine
        return ticket

    def _release(self, key: UserKey, mine: threading.Event) -> None:
        with self._lock:
            if self._tails.get(key) is mine:
                del self._tails[key]

    @contextmanager
    def turn(self, key: UserKey) -> Iterator[int]:
        """Reserve, wait and hold the user's turn for the block; yields the place number."""
        ticket = self.reserve(key)
        try:
            ticket.wait()
            yield ticket.seq
        finally:
            ticket.done()

    def pending(self) -> int:
        """Users with work in line (running or waiting)."""
        with self._lock:
            return len(self._tails)
