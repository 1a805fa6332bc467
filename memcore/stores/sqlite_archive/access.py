"""Last read times of entries on SQLite (:class:`memcore.archive_ports.AccessRepository`)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from memcore.model import UserKey
from memcore.stores.sqlite_archive.database import Database


class SqliteAccess:
    def __init__(self, db: Database) -> None:
        self._db = db

    def touch(self, key: UserKey, entry_ids: Iterable[str], at: float | None = None) -> None:
        now = time.time() if at is None else at
        rows = [(key.app, key.user, i, now) for i in dict.fromkeys(entry_ids)]
        if not rows:
            return
        with self._db.tx() as db:
            db.executemany("INSERT INTO access (app, user, entry_id, at) VALUES (?, ?, ?, ?)"
                           " ON CONFLICT (app, user, entry_id) DO UPDATE SET at = max(at, excluded.at)", rows)

    def last_access(self, key: UserKey) -> dict[str, float]:
        return {i: at for i, at in self._db.query("SELECT entry_id, at FROM access WHERE app = ? AND user = ?",
                                                  (key.app, key.user))}

    def forget(self, key: UserKey, entry_ids: Iterable[str]) -> None:
        with self._db.tx() as db:
            db.executemany("DELETE FROM access WHERE app = ? AND user = ? AND entry_id = ?",
                           [(key.app, key.user, i) for i in entry_ids])
