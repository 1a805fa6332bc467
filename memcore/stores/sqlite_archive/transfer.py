"""A user's rows out of one archive file and into another (:meth:`memcore.archive_ports.EventArchive.export_user`,
:meth:`~memcore.archive_ports.EventArchive.import_users`): what moving a user to another shard copies.

Arrival numbers and job numbers are file-wide, so an import renumbers: the user's turns get the next
arrival numbers of the target file in their order, a job's ``upto_seq`` bound maps to the number of the
last turn it covered (the count of the user's turns at or below the old bound, added to the same base),
and the jobs get new ingest numbers in their order. Every comparison the queue makes (``seq <= upto``,
``seq > after``) is among one user's turns, so it gives the same answers after the move. The knowledge
graph (fact versions, entities, their aliases) and the diary are keyed by the user's own ids: they move as
they are.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Sequence

from memcore.model import UserKey
from memcore.records import JobRecord, SessionRow, TurnRow, UserRows
from memcore.stores.archive_codec import HIDDEN_CODES, REMOVED, at_us, from_us, to_us
from memcore.stores.sqlite_archive.database import Database
from memcore.stores.sqlite_archive.events import scope_token
from memcore.stores.sqlite_archive.graph import insert_diary, insert_graph
from memcore.stores.sqlite_archive.jobs import insert_job, user_jobs
from memcore.stores.sqlite_archive.schema import USER_TABLES
from memcore.text import tokenize

_CODES = {state: code for code, state in HIDDEN_CODES.items()}


def archive_keys(db: Database) -> set[UserKey]:
    """(app, user) pairs with a row in any user table of the archive file."""
    union = " UNION ".join(f"SELECT app, user FROM {t}" for t in USER_TABLES)
    return {UserKey(app=a, user=u) for a, u in db.query(union)}


def export_rows(db: Database, key: UserKey, sequence: int | None) -> UserRows:
    scope = (key.app, key.user)
    turns = tuple(
        TurnRow(session=s, event_id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x),
                arrival=int(q), extracted=bool(e), state=HIDDEN_CODES[h])
        for s, i, r, c, t, x, q, e, h in db.query(
            "SELECT session, id, role, content, ts_us, external_context, seq, extracted, hidden FROM events"
            " WHERE app = ? AND user = ? ORDER BY seq", scope))
    sessions = tuple(
        SessionRow(session=s, last_extract_at=from_us(c), external_context=bool(x), updated_at=float(u))
        for s, c, x, u in db.query("SELECT session, last_extract_us, external_context, updated_at FROM sessions"
                                   " WHERE app = ? AND user = ? ORDER BY session", scope))
    jobs = tuple(user_jobs(db, key))
    access = tuple((i, float(at)) for i, at in db.query(
        "SELECT entry_id, at FROM access WHERE app = ? AND user = ? ORDER BY entry_id", scope))
    return UserRows(key=key, turns=turns, sessions=sessions, jobs=jobs, access=access, sequence=sequence)


def _delete_user(tx: sqlite3.Connection, key: UserKey) -> None:
    scope = (key.app, key.user)
    tx.execute("DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE app = ? AND user = ?)", scope)
    for table in USER_TABLES:
        tx.execute(f"DELETE FROM {table} WHERE app = ? AND user = ?", scope)


def import_rows(db: Database, users: Sequence[UserRows]) -> None:
    """Replace each user's rows in ``db`` by its item of ``users``, all in one transaction (the write counters
    are the caller's)."""
    with db.tx() as tx:
        for rows in users:
            _import(tx, rows)


def _import(tx: sqlite3.Connection, rows: UserRows) -> None:
    key = rows.key
    old = sorted(t.arrival for t in rows.turns)
    _delete_user(tx, key)
    found = tx.execute("SELECT value FROM counters WHERE name = 'event_seq'").fetchone()
    base = int(found[0]) if found else 0
    scope = scope_token(key)
    for rank, t in enumerate(sorted(rows.turns, key=lambda t: t.arrival), start=1):
        code = _CODES[t.state]
        cur = tx.execute(
            "INSERT INTO events (app, user, session, id, role, content, ts_us, external_context, seq, extracted,"
            " hidden) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key.app, key.user, t.session, t.event_id, t.role, t.content, to_us(t.timestamp),
             int(t.external_context), base + rank, int(t.extracted), code))
        if code != REMOVED:  # what append indexed and remove did not drop
            tx.execute("INSERT INTO events_fts (rowid, scope, tokens) VALUES (?, ?, ?)",
                       (cur.lastrowid, scope, " ".join(tokenize(t.content))))
    if old:
        tx.execute("INSERT INTO counters (name, value) VALUES ('event_seq', ?) ON CONFLICT (name)"
                   " DO UPDATE SET value = excluded.value", (base + len(old),))
    tx.executemany(
        "INSERT INTO sessions (app, user, session, last_extract_us, external_context, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(key.app, key.user, s.session, to_us(s.last_extract_at) if s.last_extract_at else None,
          int(s.external_context), s.updated_at) for s in rows.sessions])
    for job in sorted(rows.jobs, key=lambda j: j.seq):
        insert_job(tx, job.model_copy(update={"app": key.app, "user": key.user}), _bound(job, old, base))
    tx.executemany("INSERT INTO access (app, user, entry_id, at) VALUES (?, ?, ?, ?)",
                   [(key.app, key.user, i, at) for i, at in rows.access])
    insert_graph(tx, key, rows.facts, rows.entities)
    insert_diary(tx, key, rows.diary)


def _bound(job: JobRecord, old: list[int], base: int) -> int | None:
    """The job's ``upto_seq`` in the target file's numbering (``old``: the user's old arrival numbers, sorted)."""
    if job.upto_seq is None:
        return None
    return base + bisect.bisect_right(old, job.upto_seq)
