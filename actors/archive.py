"""The shard's event archive, session cursors and job table: one SQLite file per shard.

``shard_dir/archive.sqlite3`` (WAL mode, ``synchronous=FULL``: a commit survives a killed
process and a power loss). Pure Python (stdlib ``sqlite3``), no Ray. Tables:

- ``events``: raw user/assistant turns with text (what extraction and session recall read).
  Tool messages and tool-call-only assistant messages are not archived: extraction never
  looks at them, recall returns turns. Insert is idempotent by (app, user, session, event id);
  a resent event keeps its first version. Each turn has an arrival number ``seq`` (shard-wide,
  increasing, never reused: ``counters``) and an ``extracted`` flag: the delta of a session is
  its turns not extracted yet, in arrival order, whatever their timestamps say. ``hidden``: 0 visible,
  1 hidden by a soft delete, 2 removed (text blanked) by a hard delete or a clear; only visible turns
  are read by recall, extraction and re-extraction (:mod:`actors.erasure`). ``events_fts`` is an FTS5 index over
  :func:`memcore.text.tokenize` tokens (CJK characters included) with a per-user scope token,
  ranked by BM25, for session recall.
- ``sessions``: the seeds' cursor ``last_extract_at`` (the newest extracted turn's time, for
  reporting and the interval checker; it moves forward only and never hides a turn) and whether any
  event of the session was marked ``external_context`` (of any role, tool results included).
- ``jobs``: one row per ingest (:mod:`actors.job_table`, mixed into :class:`SqliteArchive`).
- ``access``: last read time of entries, for the TTL's optional refresh on access.

One connection serialised by a lock; every method is one short transaction. ``secure_delete`` is on:
deleted rows are overwritten, and a compaction (:func:`actors.erasure.compact_archive`) vacuums the file.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from actors.job_table import JobTable
from actors.timestamps import at_us, from_us, to_us
from memcore.extraction.events import Event
from memcore.model import UserKey
from memcore.text import tokenize

MAX_QUERY_TOKENS = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL, id TEXT NOT NULL,
    role TEXT NOT NULL, content TEXT NOT NULL, ts_us INTEGER NOT NULL,
    external_context INTEGER NOT NULL DEFAULT 0, seq INTEGER, extracted INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app, user, session, id)
);
CREATE INDEX IF NOT EXISTS events_by_time ON events (app, user, session, ts_us);
CREATE INDEX IF NOT EXISTS events_unextracted ON events (ts_us) WHERE extracted = 0;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS events_fts USING fts5 (scope, tokens);
CREATE TABLE IF NOT EXISTS sessions (
    app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL,
    last_extract_us INTEGER, external_context INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL,
    PRIMARY KEY (app, user, session)
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE, app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL,
    status TEXT NOT NULL, upto_us INTEGER, created_at REAL NOT NULL, started_at REAL, finished_at REAL,
    sync INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, reason TEXT, result TEXT,
    cursor_us INTEGER, upto_seq INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, seq);
CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (app, user, session, status);
CREATE INDEX IF NOT EXISTS events_pending ON events (app, user, session, extracted, seq);
CREATE TABLE IF NOT EXISTS access (
    app TEXT NOT NULL, user TEXT NOT NULL, entry_id TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (app, user, entry_id)
);
"""


def scope_token(key: UserKey) -> str:
    """The FTS token that confines a recall query to one (app, user)."""
    return "s" + hashlib.blake2b(f"{key.app}\x00{key.user}".encode(), digest_size=12).hexdigest()


class RecallHit(BaseModel):
    """One archived turn of another session."""

    session: str
    event_id: str
    role: str
    content: str
    timestamp: datetime
    score: float = Field(description="BM25 relevance (higher is better).")


class SqliteArchive(JobTable):
    """:class:`memcore.ports.EventArchive` plus the job table, on SQLite."""

    def __init__(self, path: str | Path, *, synchronous: Literal["FULL", "NORMAL"] = "FULL") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA secure_delete=ON")  # deleted rows are overwritten, not left in free pages
        self._migrate()
        self._db.executescript(_SCHEMA)

    def _migrate(self) -> None:
        """Archives written before arrival numbers: number their turns by insertion order, mark the
        turns at or before each session's cursor as extracted, give jobs a ``upto_seq`` column."""
        def columns(table: str) -> set[str]:
            return {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}

        events = columns("events")
        if events and "seq" not in events:
            self._db.executescript(
                "BEGIN; ALTER TABLE events ADD COLUMN seq INTEGER;"
                " ALTER TABLE events ADD COLUMN extracted INTEGER NOT NULL DEFAULT 0;"
                " UPDATE events SET seq = rowid;"
                " UPDATE events SET extracted = 1 WHERE ts_us <= coalesce((SELECT last_extract_us FROM sessions s"
                " WHERE s.app = events.app AND s.user = events.user AND s.session = events.session), -1);"
                " CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
                " INSERT OR REPLACE INTO counters VALUES ('event_seq', (SELECT coalesce(max(seq), 0) FROM events));"
                " COMMIT;")
        if events and "hidden" not in columns("events"):
            self._db.execute("ALTER TABLE events ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0")
        jobs = columns("jobs")
        if jobs and "upto_seq" not in jobs:
            self._db.execute("ALTER TABLE jobs ADD COLUMN upto_seq INTEGER")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, tuple(args)).fetchall())

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction (for :mod:`actors.erasure`, which keeps the erasure SQL)."""
        return self._tx()

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._query(sql, args)

    def maintenance_sql(self, *statements: str) -> None:
        """Run statements outside a transaction (VACUUM, checkpoints), under the connection's lock."""
        with self._lock:
            for sql in statements:
                self._db.execute(sql).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---------------------------------------------------------------- events
    def append(self, key: UserKey, session: str, events: Sequence[Event]) -> int:
        """Archive the text turns of ``events`` (idempotent); marks the session's external context."""
        new = 0
        scope = scope_token(key)
        external = any(e.external_context for e in events)
        with self._tx() as db:
            for e in events:
                if not e.is_text:
                    continue
                cur = db.execute(
                    "INSERT OR IGNORE INTO events (app, user, session, id, role, content, ts_us, external_context,"
                    " seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, (SELECT coalesce(max(value), 0) + 1 FROM counters"
                    " WHERE name = 'event_seq'))",
                    (key.app, key.user, session, e.id, e.role, e.content, to_us(e.timestamp), int(e.external_context)),
                )
                if cur.rowcount:
                    new += 1
                    db.execute("INSERT INTO counters (name, value) VALUES ('event_seq', 1) ON CONFLICT (name)"
                               " DO UPDATE SET value = value + 1")
                    db.execute("INSERT INTO events_fts (rowid, scope, tokens) VALUES (?, ?, ?)",
                               (cur.lastrowid, scope, " ".join(tokenize(e.content))))
            db.execute(
                "INSERT INTO sessions (app, user, session, external_context, updated_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (app, user, session) DO UPDATE SET"
                " external_context = max(external_context, excluded.external_context),"
                " updated_at = excluded.updated_at",
                (key.app, key.user, session, int(external), time.time()),
            )
        return new

    def read(self, key: UserKey, session: str | None = None) -> list[Event]:
        sql = ("SELECT id, role, content, ts_us, external_context FROM events WHERE app = ? AND user = ?"
               " AND hidden = 0")
        args: list[Any] = [key.app, key.user]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        rows = self._query(sql + " ORDER BY ts_us, rowid", args)
        return [Event(id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x))
                for i, r, c, t, x in rows]

    def arrived(self, key: UserKey, session: str) -> list[Event]:
        """The session's archived turns in arrival order (what :func:`memcore.extraction.events.identify`
        matches a resent history against)."""
        rows = self._query("SELECT id, role, content, ts_us, external_context FROM events WHERE app = ? AND user = ?"
                           " AND session = ? ORDER BY seq", (key.app, key.user, session))
        return [Event(id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x))
                for i, r, c, t, x in rows]

    def unextracted(self, key: UserKey, session: str, *, after_seq: int | None = None,
                    upto_seq: int | None = None) -> list[tuple[int, Event]]:
        """The session's turns not extracted yet, in arrival order, as ``(seq, event)``; optionally only
        those after ``after_seq`` (what unfinished jobs cover) and up to ``upto_seq`` (a job's bound)."""
        sql = ("SELECT seq, id, role, content, ts_us, external_context FROM events WHERE app = ? AND user = ?"
               " AND session = ? AND extracted = 0 AND hidden = 0")
        args: list[Any] = [key.app, key.user, session]
        if after_seq is not None:
            sql += " AND seq > ?"
            args.append(after_seq)
        if upto_seq is not None:
            sql += " AND seq <= ?"
            args.append(upto_seq)
        rows = self._query(sql + " ORDER BY seq", args)
        return [(q, Event(id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x)))
                for q, i, r, c, t, x in rows]

    def oldest_unextracted(self) -> float | None:
        """Epoch seconds of the oldest turn not extracted yet, over all users (the cursor-lag metric)."""
        rows = self._query("SELECT min(ts_us) FROM events WHERE extracted = 0")
        return None if not rows or rows[0][0] is None else rows[0][0] / 1e6

    def mark_extracted(self, key: UserKey, session: str, upto_seq: int | None = None,
                       ids: Sequence[str] | None = None) -> int:
        """Mark the session's turns extracted: those up to ``upto_seq``, or those named by ``ids``, or
        (neither given) all of them; returns how many changed."""
        sql = "UPDATE events SET extracted = 1 WHERE app = ? AND user = ? AND session = ? AND extracted = 0"
        args: list[Any] = [key.app, key.user, session]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            args.append(upto_seq)
        with self._tx() as db:
            if ids is None:
                return int(db.execute(sql, args).rowcount)
            return sum(int(db.execute(sql + " AND id = ?", [*args, i]).rowcount) for i in dict.fromkeys(ids))

    def visible(self, key: UserKey, ids: Sequence[str]) -> set[str]:
        """Which of these event ids of ``key`` are archived and neither hidden nor removed."""
        found: set[str] = set()
        unique = list(dict.fromkeys(ids))
        for i in range(0, len(unique), 500):
            chunk = unique[i:i + 500]
            marks = ", ".join("?" * len(chunk))
            found |= {r[0] for r in self._query(
                f"SELECT id FROM events WHERE app = ? AND user = ? AND hidden = 0 AND id IN ({marks})",
                (key.app, key.user, *chunk))}
        return found

    def sessions(self, key: UserKey) -> list[str]:
        return [r[0] for r in self._query(
            "SELECT session FROM sessions WHERE app = ? AND user = ? ORDER BY session", (key.app, key.user))]

    def sessions_in_order(self, key: UserKey) -> list[str]:
        """``key``'s sessions that hold archived turns, by their first turn's time (then id)."""
        return [r[0] for r in self._query(
            "SELECT session, min(ts_us) AS first FROM events WHERE app = ? AND user = ? AND hidden = 0"
            " GROUP BY session ORDER BY first, session", (key.app, key.user))]

    def users(self, apps: Sequence[str] = (), users: Sequence[str] = ()) -> list[UserKey]:
        """Every (app, user) with an archived session, optionally only of ``apps`` / named ``users``."""
        sql = "SELECT DISTINCT app, user FROM sessions"
        where: list[str] = []
        args: list[Any] = []
        if apps:
            where.append(f"app IN ({', '.join('?' * len(apps))})")
            args += list(apps)
        if users:
            where.append(f"user IN ({', '.join('?' * len(users))})")
            args += list(users)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [UserKey(app=a, user=u) for a, u in self._query(sql + " ORDER BY app, user", args)]

    def has_external_context(self, key: UserKey, session: str) -> bool:
        rows = self._query("SELECT external_context FROM sessions WHERE app = ? AND user = ? AND session = ?",
                           (key.app, key.user, session))
        return bool(rows and rows[0][0])

    # ---------------------------------------------------------------- cursor
    def last_extract_at(self, key: UserKey, session: str) -> datetime | None:
        rows = self._query("SELECT last_extract_us FROM sessions WHERE app = ? AND user = ? AND session = ?",
                           (key.app, key.user, session))
        return from_us(rows[0][0]) if rows else None

    def set_last_extract_at(self, key: UserKey, session: str, at: datetime) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (app, user, session, last_extract_us, updated_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (app, user, session) DO UPDATE SET"
                " last_extract_us = max(coalesce(last_extract_us, excluded.last_extract_us), excluded.last_extract_us),"
                " updated_at = excluded.updated_at",
                (key.app, key.user, session, to_us(at), time.time()),
            )

    # ---------------------------------------------------------------- recall
    def search(self, key: UserKey, query: str, *, exclude_session: str | None = None,
               limit: int = 10) -> list[RecallHit]:
        """BM25 over the archived turns of ``key``'s sessions other than ``exclude_session``."""
        tokens = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TOKENS]
        if not tokens:
            return []
        terms = " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)
        match = f'scope : "{scope_token(key)}" AND tokens : ({terms})'
        sql = ("SELECT e.session, e.id, e.role, e.content, e.ts_us, bm25(events_fts, 0.0, 1.0) AS rank"
               " FROM events_fts JOIN events e ON e.rowid = events_fts.rowid"
               " WHERE events_fts MATCH ? AND e.app = ? AND e.user = ? AND e.hidden = 0")
        args: list[Any] = [match, key.app, key.user]
        if exclude_session is not None:
            sql += " AND e.session != ?"
            args.append(exclude_session)
        sql += " ORDER BY rank, e.ts_us DESC, e.id LIMIT ?"
        args.append(limit)
        return [RecallHit(session=s, event_id=i, role=r, content=c, timestamp=at_us(t), score=round(-rank, 6))
                for s, i, r, c, t, rank in self._query(sql, args)]

    # ---------------------------------------------------------------- access (TTL refresh)
    def touch(self, key: UserKey, entry_ids: Iterable[str], at: float | None = None) -> None:
        now = time.time() if at is None else at
        rows = [(key.app, key.user, i, now) for i in dict.fromkeys(entry_ids)]
        if not rows:
            return
        with self._tx() as db:
            db.executemany("INSERT INTO access (app, user, entry_id, at) VALUES (?, ?, ?, ?)"
                           " ON CONFLICT (app, user, entry_id) DO UPDATE SET at = max(at, excluded.at)", rows)

    def last_access(self, key: UserKey) -> dict[str, float]:
        return {i: at for i, at in self._query("SELECT entry_id, at FROM access WHERE app = ? AND user = ?",
                                               (key.app, key.user))}

    def forget_access(self, key: UserKey, entry_ids: Iterable[str]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM access WHERE app = ? AND user = ? AND entry_id = ?",
                           [(key.app, key.user, i) for i in entry_ids])
