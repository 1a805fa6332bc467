"""The per-user write counter on SQLite (:class:`memcore.archive_ports.SequenceRepository`), in its own file.

A write's number is taken when it arrives at the shard (:meth:`actors.queues.UserQueues.reserve`) and
is committed before the write runs, so the numbers of one user keep rising across shard restarts and
crashes (a write that dies after taking its number leaves a gap, never a repeat). Erasing the user
keeps its row (the app and user ids and a number), so the numbers never repeat after an erasure
either. Its own file with ``synchronous=NORMAL``: a committed number survives the process being
killed, and a write does not wait for a disk flush to get its number.
"""

from __future__ import annotations

from pathlib import Path

from memcore.model import UserKey
from memcore.stores.sqlite_archive.database import Database

_SCHEMA = ("CREATE TABLE IF NOT EXISTS user_seq (app TEXT NOT NULL, user TEXT NOT NULL, value INTEGER NOT NULL,"
           " PRIMARY KEY (app, user)) WITHOUT ROWID")


class SqliteSequence:
    def __init__(self, path: str | Path) -> None:
        self._db = Database(path, synchronous="NORMAL")
        self._db.script(_SCHEMA)

    def next(self, key: UserKey) -> int:
        rows = self._db.query(  # one statement, committed when it returns (autocommit)
            "INSERT INTO user_seq (app, user, value) VALUES (?, ?, 1) ON CONFLICT (app, user)"
            " DO UPDATE SET value = value + 1 RETURNING value", (key.app, key.user))
        return int(rows[0][0])

    def value(self, key: UserKey) -> int | None:
        """The user's last number taken (None: none yet)."""
        rows = self._db.query("SELECT value FROM user_seq WHERE app = ? AND user = ?", (key.app, key.user))
        return int(rows[0][0]) if rows else None

    def raise_to(self, key: UserKey, value: int) -> None:
        """Make the user's last number at least ``value`` (a counter moved from another file)."""
        self._db.query("INSERT INTO user_seq (app, user, value) VALUES (?, ?, ?) ON CONFLICT (app, user)"
                       " DO UPDATE SET value = max(value, excluded.value)", (key.app, key.user, value))

    def keys(self) -> list[UserKey]:
        return [UserKey(app=a, user=u) for a, u in self._db.query("SELECT app, user FROM user_seq")]

    def close(self) -> None:
        self._db.close()
