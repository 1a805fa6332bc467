"""The shard lease on PostgreSQL (:class:`memcore.archive_ports.ShardLease`): fencing of shard incarnations.

Table ``shard_leases``: one row per shard number with its ``epoch`` (rising by one each time an
incarnation starts), the ``holder`` (host and process) and when it was taken. :meth:`PgLease.acquire`
raises the epoch in its own transaction and installs a fence on the archive's database
(:attr:`memcore.stores.postgres_archive.database.PgDatabase.fence`): every later transaction of this
incarnation that writes first reads the row ``FOR SHARE`` and is refused with :class:`memcore.errors.FencedError`
when the epoch is no longer its own. The share lock lasts until that transaction ends, and taking the
lease updates the row, so the two are ordered: a transaction of the old incarnation either committed
before the new epoch exists, or sees the new epoch and writes nothing. Reads run outside a transaction
and do not read the lease (they write nothing; the shard checks the lease before its own writes). Once
refused, the lease stays fenced: every later call, reads too, raises at once, without asking the server.
"""

from __future__ import annotations

import os
import socket
import time

from memcore.errors import FencedError
from memcore.stores.postgres_archive.database import Cursor, PgDatabase

_CHECK = "SELECT epoch FROM shard_leases WHERE shard = %s FOR SHARE"


class PgLease:
    def __init__(self, db: PgDatabase, shard: int) -> None:
        self._db = db
        self.shard = shard
        self._epoch: int | None = None
        self._fenced: str | None = None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    def acquire(self) -> int:
        holder = f"{socket.gethostname()}:{os.getpid()}"
        with self._db.tx(fenced=False) as cur:
            cur.execute(
                "INSERT INTO shard_leases (shard, epoch, holder, taken_at) VALUES (%s, 1, %s, %s)"
                " ON CONFLICT (shard) DO UPDATE SET epoch = shard_leases.epoch + 1, holder = excluded.holder,"
                " taken_at = excluded.taken_at RETURNING epoch", (self.shard, holder, time.time()))
            row = cur.fetchone()
        assert row is not None
        self._epoch, self._fenced = int(row[0]), None
        self._db.fence = self
        return self._epoch

    def check(self) -> None:
        with self._db.tx():
            pass

    def before_read(self) -> None:
        if self._fenced is not None:
            raise FencedError(self._fenced, field="shard")

    def in_transaction(self, cur: Cursor) -> None:
        self.before_read()
        cur.execute(_CHECK, (self.shard,))
        row = cur.fetchone()
        current = None if row is None else int(row[0])
        if current != self._epoch:
            self._fenced = (f"shard {self.shard}: this incarnation (lease epoch {self._epoch}) was replaced by a"
                            f" newer one (epoch {current}); it writes nothing more, retry on the current one")
            raise FencedError(self._fenced, field="shard")
