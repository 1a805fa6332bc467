"""The shard lease of the SQLite archive (:class:`memcore.archive_ports.ShardLease`): nothing to fence.

The archive's files are in the shard's own directory on one machine, and one process at a time opens a
shard directory (the embedded deployment runs one Ray node, where Ray keeps one incarnation of a shard
actor alive; a second process on the same directory would be refused by the Qdrant Edge store's lock).
So the lease is a local counter that never fails; fencing between incarnations on different nodes is the
PostgreSQL archive's (:mod:`memcore.stores.postgres_archive.lease`).
"""

from __future__ import annotations


class LocalLease:
    def __init__(self) -> None:
        self._epoch: int | None = None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    @property
    def fenced(self) -> bool:
        return False

    def acquire(self) -> int:
        self._epoch = (self._epoch or 0) + 1
        return self._epoch

    def check(self) -> None:
        return None
