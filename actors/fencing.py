"""Fencing of a shard incarnation: once another incarnation of the same shard number has taken the
shard's lease (:class:`memcore.archive_ports.ShardLease`, a rising epoch in the archive), this one writes nothing
more and stops.

Where a stale write is refused: every archive transaction checks the lease inside itself (the
PostgreSQL engine, atomically), and the writes gate checks it before each write to the vector store and
the keyword index (:class:`actors.write_gate.WriteGate`). The first refusal raises
:class:`memcore.errors.FencedError` (HTTP 503: the client's retry reaches the current incarnation);
:class:`Fencing` then stops the extraction workers and the maintenance thread, and every later call of
the shard (reads too) raises the same error at once.

The process is not made to exit: Ray has already given the shard's name to the new incarnation when
the old one wakes up (it kills the old worker when it can), and a process that exited while still
being the actor Ray knows would be restarted, take the lease back and fence the current one, so two
clusters during an upgrade would take it from each other in turn. A fenced incarnation never takes the
lease again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from memcore.archive_ports import ShardLease
from memcore.errors import FencedError

log = logging.getLogger(__name__)
C = TypeVar("C", bound=type)


class Fencing:
    def __init__(self, shard: int, lease: ShardLease, stop: Callable[[], None]) -> None:
        self.shard = shard
        self.lease = lease
        self._stop = stop
        self._lost: FencedError | None = None
        self._lock = threading.Lock()

    @property
    def lost(self) -> FencedError | None:
        """The refusal that fenced this incarnation (None while it holds the lease)."""
        return self._lost

    def refuse_if_lost(self) -> None:
        if self._lost is not None:
            raise FencedError(self._lost.message, field=self._lost.field)

    def fenced(self, exc: FencedError) -> None:
        """Record the first refusal and stop the shard's background work (in a thread of its own: the
        caller may be one of the workers being stopped)."""
        with self._lock:
            if self._lost is not None:
                return
            self._lost = exc
        log.error("shard %d: fenced, stopping (%s)", self.shard, exc.message)
        threading.Thread(target=self._stop, name=f"shard{self.shard}-fenced", daemon=True).start()


def fenced_calls(cls: C, names: Iterable[str], checked: Iterable[str] = ()) -> C:
    """Wrap the methods ``names`` of ``cls`` (which has a ``fencing`` attribute): refused once the instance
    is fenced; a :class:`FencedError` raised by one fences it. The methods ``checked`` (writes that do not
    pass the writes gate's check: compaction, generation switches) check the lease before they run."""
    checked = frozenset(checked)
    for name in names:
        setattr(cls, name, _guarded(getattr(cls, name), check=name in checked))
    return cls


def _guarded(fn: Callable[..., Any], *, check: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        fencing: Fencing = self.fencing
        fencing.refuse_if_lost()
        try:
            if check:
                fencing.lease.check()
            return fn(self, *args, **kwargs)
        except FencedError as exc:
            fencing.fenced(exc)
            raise

    return call
