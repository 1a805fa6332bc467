"""The archive's connection pool on PostgreSQL: every call is one short transaction on a pooled connection.

A pooled connection is checked before it is handed out (a server restart leaves broken ones behind,
they are replaced), each has the archive's schema first on its ``search_path`` and a ``statement_timeout``.
Any failure to reach the server, a connection lost mid-call, a statement cancelled by its timeout (one
waiting on a lock too) and a pool with no connection free within ``timeout_s`` raise
:class:`memcore.errors.ArchiveUnavailableError`: nothing of the call was committed, the caller may retry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from memcore.errors import ArchiveUnavailableError

log = logging.getLogger(__name__)

Cursor = psycopg.Cursor[tuple[Any, ...]]


class Fence(Protocol):
    """The shard lease's checks (:mod:`memcore.stores.postgres_archive.lease`)."""

    def in_transaction(self, cur: Cursor) -> None:
        """Run first in every transaction: raise to refuse it (it may lock what it read until the end)."""
        ...

    def before_read(self) -> None:
        """Run before a read outside a transaction: raise when the lease is known lost (no query)."""
        ...


class PgDatabase:
    def __init__(self, dsn: str, *, schema: str, pool_min: int = 1, pool_size: int = 4, timeout_s: float = 5.0,
                 connect_timeout_s: int = 5, statement_timeout_s: float = 30.0,
                 name: str = "memcluster-archive") -> None:
        self.schema = schema
        self.timeout_s = timeout_s
        self._search_path = f'SET search_path TO "{schema}", public'
        ms = max(1, round(statement_timeout_s * 1000))
        self._statement_timeout = f"SET statement_timeout = {ms}"
        # a transaction left open by a paused or partitioned process is ended by the server, so the locks it
        # holds (the shard lease's share lock) do not block a new incarnation longer than a statement may run
        self._idle_timeout = f"SET idle_in_transaction_session_timeout = {ms}"
        self.fence: Fence | None = None
        self.pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            dsn, min_size=min(pool_min, pool_size), max_size=pool_size, timeout=timeout_s, name=name,
            kwargs={"connect_timeout": connect_timeout_s, "application_name": name},
            configure=self._configure, check=ConnectionPool.check_connection, open=False)
        self.pool.open(wait=False)

    def _configure(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        conn.execute(self._search_path)
        conn.execute(self._statement_timeout)
        conn.execute(self._idle_timeout)
        conn.commit()

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except PoolTimeout as exc:
            raise ArchiveUnavailableError(
                f"no archive database connection within {self.timeout_s:g} s (the server is down or"
                " unreachable, or every pooled connection is busy); retry later", field="archive") from exc
        except (psycopg.OperationalError, psycopg.InterfaceError,
                psycopg.errors.IdleInTransactionSessionTimeout) as exc:
            raise ArchiveUnavailableError(f"the archive database failed ({type(exc).__name__}: "
                                          f"{str(exc).strip()[:200]}); retry later", field="archive") from exc

    @contextmanager
    def tx(self, *, fenced: bool = True) -> Iterator[Cursor]:
        """One transaction: committed when the block returns, rolled back when it raises. ``fence`` (when
        set) runs first in it, unless ``fenced`` is False (taking the lease itself)."""
        with self._unavailable(), self.pool.connection() as conn, conn.cursor() as cur:
            if fenced and self.fence is not None:
                self.fence.in_transaction(cur)
            yield cur

    def query(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """One statement that writes (``INSERT ... RETURNING``) in a transaction of its own; its rows."""
        with self.tx() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def read(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """One statement that only reads, in autocommit (one round trip: no ``BEGIN`` / ``COMMIT``); its rows.
        The lease row is not read (a read writes nothing), but an incarnation known to be fenced is refused."""
        if self.fence is not None:
            self.fence.before_read()
        with self._unavailable(), self.pool.connection() as conn:
            conn.autocommit = True
            try:
                return list(conn.execute(sql, args).fetchall())
            finally:
                if not conn.closed:
                    conn.autocommit = False

    def outside_tx(self, *statements: str) -> None:
        """Statements that cannot run in a transaction (VACUUM), without the statement timeout."""
        with self._unavailable(), self.pool.connection() as conn:
            conn.autocommit = True
            try:
                conn.execute("SET statement_timeout = 0")
                for sql in statements:
                    conn.execute(sql)
            finally:
                conn.execute(self._statement_timeout)
                conn.autocommit = False

    def close(self) -> None:
        self.pool.close(timeout=self.timeout_s)
