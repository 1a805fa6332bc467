"""The per-user write counter on PostgreSQL (:class:`memcore.archive_ports.SequenceRepository`).

One upsert per number, committed before it is returned, so a user's numbers keep rising across shard
restarts, moves to another node and shard-count changes (the row is keyed by (app, user)); erasing the
user keeps its row, so numbers never repeat after an erasure either."""

from __future__ import annotations

from memcore.model import UserKey
from memcore.stores.postgres_archive.database import PgDatabase


class PgSequence:
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def next(self, key: UserKey) -> int:
        rows = self._db.query(
            "INSERT INTO user_seq (app, user_id, value) VALUES (%s, %s, 1) ON CONFLICT (app, user_id)"
            " DO UPDATE SET value = user_seq.value + 1 RETURNING value", (key.app, key.user))
        return int(rows[0][0])

    def value(self, key: UserKey) -> int | None:
        """The user's last number taken (None: none yet)."""
        rows = self._db.query("SELECT value FROM user_seq WHERE app = %s AND user_id = %s", (key.app, key.user))
        return int(rows[0][0]) if rows else None
