"""Session cursors and external-context marks on PostgreSQL (:class:`memcore.archive_ports.SessionRepository`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memcore.model import UserKey
from memcore.stores.archive_codec import from_us, to_us
from memcore.stores.postgres_archive.database import PgDatabase
from memcore.stores.postgres_archive.owner import Owner


class PgSessions:
    def __init__(self, db: PgDatabase, owner: Owner) -> None:
        self._db = db
        self._owner = owner

    def sessions(self, key: UserKey) -> list[str]:
        return [r[0] for r in self._db.read(
            "SELECT session FROM sessions WHERE app = %s AND user_id = %s ORDER BY session", (key.app, key.user))]

    def users(self, apps: Sequence[str] = (), users: Sequence[str] = ()) -> list[UserKey]:
        sql = f"SELECT DISTINCT app, user_id FROM sessions WHERE {self._owner.where()}"
        args: list[Any] = []
        if apps:
            sql += " AND app = ANY(%s)"
            args.append(list(apps))
        if users:
            sql += " AND user_id = ANY(%s)"
            args.append(list(users))
        return [UserKey(app=a, user=u) for a, u in self._db.read(sql + " ORDER BY app, user_id", args)]

    def has_external_context(self, key: UserKey, session: str) -> bool:
        rows = self._db.read("SELECT external_context FROM sessions WHERE app = %s AND user_id = %s AND session = %s",
                              (key.app, key.user, session))
        return bool(rows and rows[0][0])

    def last_extract_at(self, key: UserKey, session: str) -> datetime | None:
        rows = self._db.read("SELECT last_extract_us FROM sessions WHERE app = %s AND user_id = %s AND session = %s",
                              (key.app, key.user, session))
        return from_us(rows[0][0]) if rows else None

    def set_last_extract_at(self, key: UserKey, session: str, at: datetime) -> None:
        with self._db.tx() as cur:
            cur.execute(
                "INSERT INTO sessions (app, user_id, session, last_extract_us, updated_at, route)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (app, user_id, session) DO UPDATE SET"
                " last_extract_us = greatest(sessions.last_extract_us, excluded.last_extract_us),"
                " updated_at = excluded.updated_at",
                (key.app, key.user, session, to_us(at), time.time(), Owner.route(key)))
