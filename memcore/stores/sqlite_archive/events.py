"""The archived turns on SQLite (:class:`memcore.archive_ports.EventRepository`).

Tool messages and tool-call-only assistant messages are not archived: extraction never looks at them,
recall returns turns. Session recall is FTS5 over :func:`memcore.text.tokenize` tokens (CJK characters
included) with a per-user scope token, ranked by BM25. Removing a turn blanks its text and drops its
recall row; with ``secure_delete`` the bytes are overwritten, and a compaction vacuums the file.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from memcore.extraction.events import Event
from memcore.model import UserKey
from memcore.records import UNFINISHED, ArchivedTurn, RecallHit, Turn
from memcore.stores.archive_codec import HIDDEN, HIDDEN_CODES, MAX_QUERY_TOKENS, REMOVED, VISIBLE, at_us, to_us
from memcore.stores.sqlite_archive.database import Database, chunks, marks
from memcore.text import tokenize

_EVENT = "id, role, content, ts_us, external_context"
_TURN = "app = ? AND user = ? AND session = ? AND id = ?"


def scope_token(key: UserKey) -> str:
    """The FTS token that confines a recall query to one (app, user)."""
    return "s" + hashlib.blake2b(f"{key.app}\x00{key.user}".encode(), digest_size=12).hexdigest()


def _event(row: Sequence[Any]) -> Event:
    i, r, c, t, x = row
    return Event(id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x))


class SqliteEvents:
    def __init__(self, db: Database) -> None:
        self._db = db

    def append(self, key: UserKey, session: str, events: Sequence[Event]) -> int:
        new = 0
        scope = scope_token(key)
        external = any(e.external_context for e in events)
        with self._db.tx() as db:
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
        sql = f"SELECT {_EVENT} FROM events WHERE app = ? AND user = ? AND hidden = {VISIBLE}"
        args: list[Any] = [key.app, key.user]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        return [_event(r) for r in self._db.query(sql + " ORDER BY ts_us, rowid", args)]

    def arrived(self, key: UserKey, session: str) -> list[Event]:
        return [_event(r) for r in self._db.query(
            f"SELECT {_EVENT} FROM events WHERE app = ? AND user = ? AND session = ? ORDER BY seq",
            (key.app, key.user, session))]

    def unextracted(self, key: UserKey, session: str, *, after_seq: int | None = None,
                    upto_seq: int | None = None) -> list[tuple[int, Event]]:
        sql = (f"SELECT seq, {_EVENT} FROM events WHERE app = ? AND user = ? AND session = ? AND extracted = 0"
               f" AND hidden = {VISIBLE}")
        args: list[Any] = [key.app, key.user, session]
        if after_seq is not None:
            sql += " AND seq > ?"
            args.append(after_seq)
        if upto_seq is not None:
            sql += " AND seq <= ?"
            args.append(upto_seq)
        return [(r[0], _event(r[1:])) for r in self._db.query(sql + " ORDER BY seq", args)]

    def mark_extracted(self, key: UserKey, session: str, upto_seq: int | None = None,
                       ids: Sequence[str] | None = None) -> int:
        sql = "UPDATE events SET extracted = 1 WHERE app = ? AND user = ? AND session = ? AND extracted = 0"
        args: list[Any] = [key.app, key.user, session]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            args.append(upto_seq)
        with self._db.tx() as db:
            if ids is None:
                return int(db.execute(sql, args).rowcount)
            return sum(int(db.execute(sql + " AND id = ?", [*args, i]).rowcount) for i in dict.fromkeys(ids))

    def oldest_unextracted(self) -> float | None:
        rows = self._db.query("SELECT min(ts_us) FROM events WHERE extracted = 0")
        return None if not rows or rows[0][0] is None else rows[0][0] / 1e6

    def visible(self, key: UserKey, session: str, ids: Sequence[str]) -> set[str]:
        return {t.event_id for t in self.turns(key, session=session, ids=ids) if t.visible}

    def sessions_in_order(self, key: UserKey) -> list[str]:
        return [r[0] for r in self._db.query(
            f"SELECT session, min(ts_us) AS first FROM events WHERE app = ? AND user = ? AND hidden = {VISIBLE}"
            " GROUP BY session ORDER BY first, session", (key.app, key.user))]

    def search(self, key: UserKey, query: str, *, exclude_session: str | None = None,
               limit: int = 10, since: datetime | None = None) -> list[RecallHit]:
        tokens = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TOKENS]
        if not tokens:
            return []
        terms = " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)
        match = f'scope : "{scope_token(key)}" AND tokens : ({terms})'
        sql = ("SELECT e.session, e.id, e.role, e.content, e.ts_us, bm25(events_fts, 0.0, 1.0) AS rank"
               " FROM events_fts JOIN events e ON e.rowid = events_fts.rowid"
               f" WHERE events_fts MATCH ? AND e.app = ? AND e.user = ? AND e.hidden = {VISIBLE}")
        args: list[Any] = [match, key.app, key.user]
        if exclude_session is not None:
            sql += " AND e.session != ?"
            args.append(exclude_session)
        if since is not None:
            sql += " AND e.ts_us >= ?"
            args.append(to_us(since))
        sql += " ORDER BY rank, e.ts_us DESC, e.id LIMIT ?"
        args.append(limit)
        return [RecallHit(session=s, event_id=i, role=r, content=c, timestamp=at_us(t), score=round(-rank, 6))
                for s, i, r, c, t, rank in self._db.query(sql, args)]

    def count(self, key: UserKey | None = None) -> int:
        if key is None:
            return int(self._db.query("SELECT count(*) FROM events")[0][0])
        return int(self._db.query("SELECT count(*) FROM events WHERE app = ? AND user = ?",
                                  (key.app, key.user))[0][0])

    # ------------------------------------------------------------ erasure
    def turns(self, key: UserKey, *, session: str | None = None,
              ids: Sequence[str] | None = None) -> list[ArchivedTurn]:
        sql, args = "SELECT session, id, hidden FROM events WHERE app = ? AND user = ?", [key.app, key.user]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        rows: list[tuple[Any, ...]] = []
        if ids is None:
            rows = self._db.query(sql + " ORDER BY seq", args)
        for chunk in chunks(ids or ()):
            rows += self._db.query(f"{sql} AND id IN ({marks(len(chunk))}) ORDER BY seq", [*args, *chunk])
        return [ArchivedTurn(s, i, HIDDEN_CODES[h]) for s, i, h in rows]

    def hide(self, key: UserKey, turns: Iterable[Turn]) -> int:
        rows = [(key.app, key.user, t.session, t.event_id) for t in dict.fromkeys(turns)]
        with self._db.tx() as db:
            return sum(int(db.execute(f"UPDATE events SET hidden = {HIDDEN} WHERE {_TURN} AND hidden = {VISIBLE}",
                                      row).rowcount) for row in rows)

    def remove(self, key: UserKey, turns: Iterable[Turn]) -> int:
        rows = [(key.app, key.user, t.session, t.event_id) for t in dict.fromkeys(turns)]
        changed = 0
        with self._db.tx() as db:
            for row in rows:
                db.execute(f"DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE {_TURN}"
                           f" AND hidden != {REMOVED})", row)
                changed += int(db.execute(f"UPDATE events SET hidden = {REMOVED}, content = '' WHERE {_TURN}"
                                          f" AND hidden != {REMOVED}", row).rowcount)
        return changed

    def expire(self, app: str, before: datetime) -> int:
        unfinished = ", ".join(f"'{s}'" for s in UNFINISHED)
        where = ("app = ? AND ts_us < ? AND NOT (extracted = 0 AND EXISTS (SELECT 1 FROM jobs j WHERE"
                 " j.app = events.app AND j.user = events.user AND j.session = events.session"
                 f" AND j.status IN ({unfinished})))")
        args = (app, to_us(before))
        with self._db.tx() as db:
            db.execute(f"DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE {where})", args)
            return int(db.execute(f"DELETE FROM events WHERE {where}", args).rowcount)
