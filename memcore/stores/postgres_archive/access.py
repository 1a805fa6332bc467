"""Last read times of entries on PostgreSQL (:class:`memcore.archive_ports.AccessRepository`)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from memcore.model import UserKey
from memcore.stores.postgres_archive.database import PgDatabase


class PgAccess:
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def touch(self, key: UserKey, entry_ids: Iterable[str], at: float | None = None) -> None:
        now = time.time() if at is None else at
        rows = [(key.app, key.user, i, now) for i in dict.fromkeys(entry_ids)]
        if not rows:
            return
        with self._db.tx() as cur:
            cur.executemany("INSERT INTO access (app, user_id, entry_id, at) VALUES (%s, %s, %s, %s)"
                            " ON CONFLICT (app, user_id, entry_id) DO UPDATE SET"
                            " at = greatest(access.at, excluded.at)", rows)

    def last_access(self, key: UserKey) -> dict[str, float]:
        return {i: float(at) for i, at in self._db.read(
            "SELECT entry_id, at FROM access WHERE app = %s AND user_id = %s", (key.app, key.user))}

    def forget(self, key: UserKey, entry_ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(entry_ids))
        if not ids:
            return
        with self._db.tx() as cur:
            cur.execute("DELETE FROM access WHERE app = %s AND user_id = %s AND entry_id = ANY(%s)",
                        (key.app, key.user, ids))
