"""The event archive on SQLite (:class:`memcore.archive_ports.EventArchive`): one file per shard
(``archive.sqlite3``: turns, sessions, jobs, access times, the knowledge graph, the agent diary) plus the
write counter's own file (``seq.sqlite3``); the shard's layout names both (:class:`memcore.layout.ShardLayout`).

The archive file runs in WAL mode with ``synchronous=FULL`` (a commit survives a killed process and a
power loss) and ``secure_delete`` (freed bytes are zeroed); :meth:`SqliteArchive.compact` merges the
recall index, rewrites the file and truncates the write-ahead log. Pure Python (stdlib ``sqlite3``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memcore.model import UserKey
from memcore.records import UserRows
from memcore.stores.sqlite_archive.access import SqliteAccess
from memcore.stores.sqlite_archive.database import Database, Synchronous
from memcore.stores.sqlite_archive.events import SqliteEvents
from memcore.stores.sqlite_archive.graph import SqliteDiary, SqliteGraph
from memcore.stores.sqlite_archive.jobs import SqliteJobs
from memcore.stores.sqlite_archive.lease import LocalLease
from memcore.stores.sqlite_archive.schema import USER_TABLES, open_archive_db
from memcore.stores.sqlite_archive.sequence import SqliteSequence
from memcore.stores.sqlite_archive.sessions import SqliteSessions
from memcore.stores.sqlite_archive.transfer import archive_keys, export_rows, import_rows

__all__ = ["SqliteArchive"]


class SqliteArchive:
    def __init__(self, path: str | Path, sequence_path: str | Path, *, synchronous: Synchronous = "FULL") -> None:
        self.path = Path(path)
        self._db = open_archive_db(Database(self.path, synchronous=synchronous))
        self.events = SqliteEvents(self._db)
        self.sessions = SqliteSessions(self._db)
        self.jobs = SqliteJobs(self._db)
        self.access = SqliteAccess(self._db)
        self.graph = SqliteGraph(self._db)
        self.diary = SqliteDiary(self._db)
        self.lease = LocalLease()
        try:
            self.sequence = SqliteSequence(sequence_path)
        except BaseException:
            self._db.close()
            raise

    def erase_user(self, key: UserKey) -> dict[str, int]:
        scope = (key.app, key.user)
        with self._db.tx() as db:
            db.execute("DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE app = ? AND user = ?)",
                       scope)
            return {name: int(db.execute(f"DELETE FROM {name} WHERE app = ? AND user = ?", scope).rowcount)
                    for name in USER_TABLES}

    def keys(self) -> list[UserKey]:
        return sorted(archive_keys(self._db) | set(self.sequence.keys()), key=lambda k: (k.app, k.user))

    def export_user(self, key: UserKey) -> UserRows:
        return export_rows(self._db, key, self.sequence.value(key))._replace(
            facts=tuple(self.graph.facts(key)), entities=tuple(self.graph.entities(key)),
            diary=tuple(self.diary.read(key, None, limit=None)[0]))

    def import_users(self, rows: Sequence[UserRows]) -> None:
        import_rows(self._db, rows)  # one transaction of the archive file
        for user in rows:  # then the counter's own file (idempotent: never backwards)
            if user.sequence is not None:
                self.sequence.raise_to(user.key, user.sequence)

    def compact(self) -> None:
        self._db.outside_tx("INSERT INTO events_fts (events_fts) VALUES ('optimize')", "VACUUM",
                            "PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        self._db.close()
        self.sequence.close()
