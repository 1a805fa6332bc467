"""The event archive on PostgreSQL (:class:`memcore.archive_ports.EventArchive`): one database (one schema,
``archive.db_schema``) shared by every shard, reached through a connection pool (psycopg 3,
``psycopg_pool``).

Rows are keyed by (app, user), never by shard: a shard restarted on another node with an empty disk
finds its turns, cursors, jobs, write numbers, knowledge graph and diary where it left them, and a new
shard count needs no move (each shard serves the users :func:`memcore.ids.shard_of` routes to it,
:class:`~memcore.stores.postgres_archive.owner.Owner`). An unreachable server or a pool with no free
connection within ``archive.pool_timeout_s`` raises :class:`memcore.errors.ArchiveUnavailableError`
(HTTP 503 + ``Retry-After``); the pool replaces broken connections by itself when the server is back.

Fencing: a shard incarnation takes the shard's lease on start (:mod:`memcore.stores.postgres_archive.lease`);
every transaction then checks it, and one of an incarnation replaced since raises
:class:`memcore.errors.FencedError`.

Erasure: :meth:`PostgresArchive.erase_user`, ``remove`` and ``expire`` delete or blank rows at once;
:meth:`PostgresArchive.compact` then rewrites the tables holding text (``VACUUM FULL``), so the old row
versions are in no table file. The write-ahead log keeps them until its segments are recycled
(``docs/deployment.md``, "Erasure with PostgreSQL").
"""

from __future__ import annotations

from collections.abc import Sequence

from memcore.model import UserKey
from memcore.records import UserRows
from memcore.stores.postgres_archive.access import PgAccess
from memcore.stores.postgres_archive.database import PgDatabase
from memcore.stores.postgres_archive.events import PgEvents
from memcore.stores.postgres_archive.graph import PgDiary, PgGraph
from memcore.stores.postgres_archive.jobs import PgJobs
from memcore.stores.postgres_archive.lease import PgLease
from memcore.stores.postgres_archive.owner import Owner
from memcore.stores.postgres_archive.schema import TEXT_TABLES, USER_TABLES, create_schema
from memcore.stores.postgres_archive.sequence import PgSequence
from memcore.stores.postgres_archive.sessions import PgSessions
from memcore.stores.postgres_archive.transfer import archive_keys, export_rows, import_rows

__all__ = ["Owner", "PostgresArchive"]


class PostgresArchive:
    def __init__(self, dsn: str, *, schema: str = "memcluster", owner: Owner | None = None, pool_min: int = 1,
                 pool_size: int = 4, pool_timeout_s: float = 5.0, connect_timeout_s: int = 5,
                 statement_timeout_s: float = 30.0) -> None:
        self.owner = owner or Owner()
        self._db = PgDatabase(dsn, schema=schema, pool_min=pool_min, pool_size=pool_size, timeout_s=pool_timeout_s,
                              connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s,
                              name=f"memcluster-archive-{self.owner.shard}")
        try:
            create_schema(self._db)
        except BaseException:
            self._db.close()
            raise
        self.events = PgEvents(self._db, self.owner)
        self.sessions = PgSessions(self._db, self.owner)
        self.jobs = PgJobs(self._db, self.owner)
        self.access = PgAccess(self._db)
        self.sequence = PgSequence(self._db)
        self.lease = PgLease(self._db, self.owner.shard)
        self.graph = PgGraph(self._db, self.owner)
        self.diary = PgDiary(self._db, self.owner)

    def erase_user(self, key: UserKey) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._db.tx() as cur:
            for name in USER_TABLES:
                cur.execute(f"DELETE FROM {name} WHERE app = %s AND user_id = %s",
                            (key.app, key.user))
                counts[name] = cur.rowcount
        return counts

    def keys(self) -> list[UserKey]:
        return archive_keys(self._db, self.owner)

    def export_user(self, key: UserKey) -> UserRows:
        return export_rows(self._db, key)._replace(
            facts=tuple(self.graph.facts(key)), entities=tuple(self.graph.entities(key)),
            diary=tuple(self.diary.read(key, None, limit=None)[0]))

    def import_users(self, rows: Sequence[UserRows]) -> None:
        import_rows(self._db, rows)  # one transaction, the write counters included

    def compact(self) -> None:
        self.lease.check()
        self._db.outside_tx(f"VACUUM (FULL) {', '.join(TEXT_TABLES)}")

    def close(self) -> None:
        self._db.close()
