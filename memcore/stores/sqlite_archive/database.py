"""One SQLite connection of the archive, serialised by a lock: every call is one short transaction.

WAL journal; ``synchronous`` FULL (a commit survives a killed process and a power loss) or NORMAL
(a commit survives a killed process); ``secure_delete`` on: deleted rows are overwritten, not left in
free pages.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

Synchronous = Literal["FULL", "NORMAL"]
CHUNK = 500
"""Ids per ``IN (...)`` list (SQLite's bound-parameter limit is far above)."""


def chunks(ids: Iterable[str], size: int = CHUNK) -> Iterator[list[str]]:
    """``ids`` without repeats, in lists of at most ``size``."""
    unique = list(dict.fromkeys(ids))
    for i in range(0, len(unique), size):
        yield unique[i:i + size]


def marks(n: int) -> str:
    """``?, ?, ...`` for an ``IN`` list of ``n`` values."""
    return ", ".join("?" * n)


class Database:
    def __init__(self, path: str | Path, *, synchronous: Synchronous = "FULL") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = sqlite3.connect(
            str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA secure_delete=ON")

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"archive database {self.path} is closed")
        return self._db

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), rolled back when the block raises."""
        with self._lock:
            db = self._open()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._open().execute(sql, tuple(args)).fetchall())

    def script(self, sql: str) -> None:
        """Statements as one script (schema creation, migrations)."""
        with self._lock:
            self._open().executescript(sql)

    def outside_tx(self, *statements: str) -> None:
        """Statements that cannot run in a transaction (VACUUM, checkpoints)."""
        with self._lock:
            db = self._open()
            for sql in statements:
                db.execute(sql).fetchall()

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                db.close()
