"""The durable per-user write counter behind ``X-Memcluster-Seq``: one SQLite file per shard.

A write's number is taken when it arrives at the shard (:meth:`actors.queues.UserQueues.reserve`)
and is committed before the write runs, so the numbers of one user keep rising across shard
restarts and crashes (a write that dies after taking its number leaves a gap, never a repeat).
WAL journal with ``synchronous=NORMAL``: a committed number survives the process being killed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from memcore.model import UserKey

SEQ_FILE = "seq.sqlite3"

_SCHEMA = "CREATE TABLE IF NOT EXISTS user_seq (app TEXT NOT NULL, user TEXT NOT NULL, value INTEGER NOT NULL," \
          " PRIMARY KEY (app, user)) WITHOUT ROWID"


class SeqCounter:
    """Next number of a user's line, persisted; thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = sqlite3.connect(str(self.path), check_same_thread=False,
                                                              isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def next(self, key: UserKey) -> int:
        """The user's next number (1 for a user never seen), committed before it is returned."""
        with self._lock:
            if self._db is None:
                raise RuntimeError(f"sequence counter {self.path} is closed")
            row = self._db.execute(
                "INSERT INTO user_seq (app, user, value) VALUES (?, ?, 1) ON CONFLICT (app, user)"
                " DO UPDATE SET value = value + 1 RETURNING value", (key.app, key.user),
            ).fetchone()
            return int(row[0])

    def forget(self, key: UserKey) -> None:
        """Drop the user's counter (erasure): a later write of that user counts from 1 again."""
        with self._lock:
            if self._db is not None:
                self._db.execute("DELETE FROM user_seq WHERE app = ? AND user = ?", (key.app, key.user))

    def close(self) -> None:
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                db.close()
