"""Session cursors and external-context marks on SQLite (:class:`memcore.archive_ports.SessionRepository`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memcore.model import UserKey
from memcore.stores.archive_codec import from_us, to_us
from memcore.stores.sqlite_archive.database import Database, marks


class SqliteSessions:
    def __init__(self, db: Database) -> None:
        self._db = db

    def sessions(self, key: UserKey) -> list[str]:
        return [r[0] for r in self._db.query(
            "SELECT session FROM sessions WHERE app = ? AND user = ? ORDER BY session", (key.app, key.user))]

    def users(self, apps: Sequence[str] = (), users: Sequence[str] = ()) -> list[UserKey]:
        sql = "SELECT DISTINCT app, user FROM sessions"
        where: list[str] = []
        args: list[Any] = []
        if apps:
            where.append(f"app IN ({marks(len(apps))})")
            args += list(apps)
        if users:
            where.append(f"user IN ({marks(len(users))})")
            args += list(users)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [UserKey(app=a, user=u) for a, u in self._db.query(sql + " ORDER BY app, user", args)]

    def has_external_context(self, key: UserKey, session: str) -> bool:
        rows = self._db.query("SELECT external_context FROM sessions WHERE app = ? AND user = ? AND session = ?",
                              (key.app, key.user, session))
        return bool(rows and rows[0][0])

    def last_extract_at(self, key: UserKey, session: str) -> datetime | None:
        rows = self._db.query("SELECT last_extract_us FROM sessions WHERE app = ? AND user = ? AND session = ?",
                              (key.app, key.user, session))
        return from_us(rows[0][0]) if rows else None

    def set_last_extract_at(self, key: UserKey, session: str, at: datetime) -> None:
        with self._db.tx() as db:
            db.execute(
                "INSERT INTO sessions (app, user, session, last_extract_us, updated_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (app, user, session) DO UPDATE SET"
                " last_extract_us = max(coalesce(last_extract_us, excluded.last_extract_us), excluded.last_extract_us),"
                " updated_at = excluded.updated_at",
                (key.app, key.user, session, to_us(at), time.time()),
            )
