"""The shard's writes gate: every write takes its user's turn (:class:`actors.queues.UserQueues`),
then passes the gate, which a generation switch closes (:meth:`WriteGate.frozen`) until no write is
under way; while any write is, the keyword-index dirty mark exists (a shard that dies mid-write
rebuilds its keyword index on start). Past the gate, the shard's lease is checked
(:meth:`memcore.archive_ports.ShardLease.check`): a write of an incarnation replaced since is refused before it
touches the vector store or the keyword index (:mod:`actors.fencing`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.queues import UserQueues
from memcore.model import UserKey
from memcore.read_write_lock import ReadWriteLock


class WriteGate:
    """Writes hold the shared side of a :class:`memcore.read_write_lock.ReadWriteLock`, a generation switch its
    exclusive side; the first write in sets the dirty mark and the last one out removes it."""

    def __init__(self, queues: UserQueues, dirty: Path, check: Callable[[], None] | None = None) -> None:
        self._queues, self._check = queues, check
        self._lock = ReadWriteLock(on_first_shared=dirty.touch,
                                   on_last_shared=lambda: dirty.unlink(missing_ok=True))

    @contextmanager
    def writing(self, key: UserKey) -> Iterator[int]:
        """The user's write turn (its FIFO position), then the gate, with the dirty mark while any
        write is under way."""
        with self._queues.turn(key) as seq, self._lock.shared():
            if self._check is not None:
                self._check()
            yield seq

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Close the gate and wait until no write is under way (writes in line keep their places)."""
        with self._lock.exclusive():
            yield
