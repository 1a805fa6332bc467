"""The shard's writes gate: every write takes its user's turn (:class:`actors.queues.UserQueues`),
then passes the gate, which a generation switch closes (:meth:`WriteGate.frozen`) until no write is
under way; while any write is, the keyword-index dirty mark exists (a shard that dies mid-write
rebuilds its keyword index on start). Past the gate, the shard's lease is checked
(:meth:`memcore.archive_ports.ShardLease.check`): a write of an incarnation replaced since is refused before it
touches the vector store or the keyword index (:mod:`actors.fencing`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.queues import UserQueues
from memcore.model import UserKey


class WriteGate:
    def __init__(self, queues: UserQueues, dirty: Path, check: Callable[[], None] | None = None) -> None:
        self._queues, self._dirty, self._check = queues, dirty, check
        self._writers = 0
        self._frozen = False
        self._cond = threading.Condition()

    @contextmanager
    def writing(self, key: UserKey) -> Iterator[int]:
        """The user's write turn (its FIFO position), then the gate, with the dirty mark while any
        write is under way."""
        with self._queues.turn(key) as seq:
            with self._cond:
                while self._frozen:
                    self._cond.wait()
                self._writers += 1
                if self._writers == 1:
                    self._dirty.touch()
            try:
                if self._check is not None:
                    self._check()
                yield seq
            finally:
                with self._cond:
                    self._writers -= 1
                    if self._writers == 0:
                        self._dirty.unlink(missing_ok=True)
                        self._cond.notify_all()

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Close the gate and wait until no write is under way (writes in line keep their places)."""
        with self._cond:
            while self._frozen:
                self._cond.wait()
            self._frozen = True
            while self._writers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._frozen = False
                self._cond.notify_all()
