"""A user's rows out of one PostgreSQL archive and into another (:meth:`memcore.archive_ports.EventArchive.export_user`,
:meth:`~memcore.archive_ports.EventArchive.import_users`), with the semantics of the SQLite engine
(:mod:`memcore.stores.sqlite_archive.transfer`).

Arrival numbers (``events.seq``) and job numbers (``jobs.seq``) are identity columns of the whole database,
so an import renumbers: the user's turns are inserted in their order and get the next numbers drawn, a
job's ``upto_seq`` bound maps to the new number of the last turn it covered (the turn ranked by the count of
the user's turns at or below the old bound; below every new number when it covered none), and the jobs are
inserted in their order, so they are numbered after the archive's own. Every comparison the queue makes is
among one user's turns, so it gives the same answers after the move. The knowledge graph and the diary
move as they are (keyed by the user's own ids). The write counter is raised in the same transaction (never
lowered).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from memcore.ids import shard_of
from memcore.model import UserKey
from memcore.records import JobRecord, SessionRow, TurnRow, UserRows
from memcore.stores.archive_codec import (
    HIDDEN_CODES,
    JOB_COLUMNS,
    REMOVED,
    at_us,
    from_us,
    job_from_row,
    job_result,
    to_us,
)
from memcore.stores.postgres_archive.database import Cursor, PgDatabase
from memcore.stores.postgres_archive.graph import insert_diary, insert_graph
from memcore.stores.postgres_archive.owner import Owner
from memcore.stores.postgres_archive.schema import UNROUTED_TABLES, USER_TABLES
from memcore.text import tokenize

_CODES = {state: code for code, state in HIDDEN_CODES.items()}
_SCOPE = "app = %s AND user_id = %s"


def archive_keys(db: PgDatabase, owner: Owner) -> list[UserKey]:
    """(app, user) pairs of ``owner``'s users with a row in any user table or a write counter, sorted (the
    tables with a ``route`` column select in SQL; ``access`` and ``user_seq`` have none, they are filtered here)."""
    routed = [t for t in USER_TABLES if t not in UNROUTED_TABLES]
    keys = {UserKey(app=a, user=u) for a, u in db.query(
        " UNION ".join(f"SELECT app, user_id FROM {t} WHERE {owner.where()}" for t in routed))}
    keys |= {k for k in (UserKey(app=a, user=u) for a, u in db.query(
        " UNION ".join(f"SELECT app, user_id FROM {t}" for t in UNROUTED_TABLES)))
        if shard_of(k, owner.shards) == owner.shard}
    return sorted(keys, key=lambda k: (k.app, k.user))


def export_rows(db: PgDatabase, key: UserKey) -> UserRows:
    """``key``'s turns, sessions, jobs, access times and write counter, in one snapshot (the graph and the diary
    are its repositories', :meth:`memcore.stores.postgres_archive.PostgresArchive.export_user`)."""
    scope = (key.app, key.user)
    with db.tx() as cur:  # one snapshot of the user
        cur.execute("SELECT session, id, role, content, ts_us, external_context, seq, extracted, hidden FROM events"
                    f" WHERE {_SCOPE} ORDER BY seq", scope)
        turns = tuple(TurnRow(session=s, event_id=i, role=r, content=c, timestamp=at_us(t),
                              external_context=bool(x), arrival=int(q), extracted=bool(e), state=HIDDEN_CODES[h])
                      for s, i, r, c, t, x, q, e, h in cur.fetchall())
        cur.execute(f"SELECT session, last_extract_us, external_context, updated_at FROM sessions WHERE {_SCOPE}"
                    " ORDER BY session", scope)
        sessions = tuple(SessionRow(session=s, last_extract_at=from_us(c), external_context=bool(x),
                                    updated_at=float(u)) for s, c, x, u in cur.fetchall())
        cur.execute(f"SELECT {JOB_COLUMNS.format(user='user_id')} FROM jobs WHERE {_SCOPE} ORDER BY seq", scope)
        jobs = tuple(job_from_row(r) for r in cur.fetchall())
        cur.execute(f"SELECT entry_id, at FROM access WHERE {_SCOPE} ORDER BY entry_id", scope)
        access = tuple((i, float(at)) for i, at in cur.fetchall())
        cur.execute(f"SELECT value FROM user_seq WHERE {_SCOPE}", scope)
        found = cur.fetchone()
    return UserRows(key=key, turns=turns, sessions=sessions, jobs=jobs, access=access,
                    sequence=int(found[0]) if found else None)


def import_rows(db: PgDatabase, users: Sequence[UserRows]) -> None:
    """Replace each user's rows by its item of ``users`` and raise its write counter, in one transaction."""
    with db.tx() as cur:
        for rows in users:
            _import(cur, rows)


def _import(cur: Cursor, rows: UserRows) -> None:
    key = rows.key
    scope = (key.app, key.user)
    route = Owner.route(key)
    for table in USER_TABLES:
        cur.execute(f"DELETE FROM {table} WHERE {_SCOPE}", scope)
    ordered = sorted(rows.turns, key=lambda t: t.arrival)
    new: list[int] = []
    for t in ordered:
        code = _CODES[t.state]
        tokens = [] if code == REMOVED else tokenize(t.content)  # what append indexed and remove did not drop
        cur.execute(
            "INSERT INTO events (app, user_id, session, id, role, content, ts_us, external_context, extracted,"
            " hidden, route, tokens, ntokens) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING seq",
            (*scope, t.session, t.event_id, t.role, t.content, to_us(t.timestamp), t.external_context, t.extracted,
             code, route, tokens, len(tokens)))
        found = cur.fetchone()
        assert found is not None  # RETURNING of an INSERT without a conflict clause: one row
        new.append(int(found[0]))
    cur.executemany(
        "INSERT INTO sessions (app, user_id, session, last_extract_us, external_context, updated_at, route)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [(*scope, s.session, to_us(s.last_extract_at) if s.last_extract_at else None, s.external_context,
          s.updated_at, route) for s in rows.sessions])
    old = [t.arrival for t in ordered]
    for job in sorted(rows.jobs, key=lambda j: j.seq):
        _insert_job(cur, job.model_copy(update={"app": key.app, "user": key.user}), _bound(job, old, new), route)
    if rows.access:
        cur.executemany("INSERT INTO access (app, user_id, entry_id, at) VALUES (%s, %s, %s, %s)",
                        [(*scope, i, at) for i, at in rows.access])
    insert_graph(cur, key, rows.facts, rows.entities)
    insert_diary(cur, key, rows.diary)
    if rows.sequence is not None:
        cur.execute("INSERT INTO user_seq (app, user_id, value) VALUES (%s, %s, %s) ON CONFLICT (app, user_id)"
                    " DO UPDATE SET value = greatest(user_seq.value, excluded.value)", (*scope, rows.sequence))


def _bound(job: JobRecord, old: list[int], new: list[int]) -> int | None:
    """The job's ``upto_seq`` in the new numbering (``old`` / ``new``: the user's turns' numbers, in order)."""
    if job.upto_seq is None:
        return None
    covered = bisect.bisect_right(old, job.upto_seq)
    if covered:
        return new[covered - 1]
    return new[0] - 1 if new else 0


def _insert_job(cur: Cursor, job: JobRecord, upto_seq: int | None, route: object) -> None:
    cur.execute(
        "INSERT INTO jobs (id, app, user_id, session, status, upto_us, created_at, started_at, finished_at, sync,"
        " attempts, reason, result, cursor_us, upto_seq, route)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (job.job_id, job.app, job.user, job.session, job.status, to_us(job.upto) if job.upto else None,
         job.created_at.timestamp(), job.started_at.timestamp() if job.started_at else None,
         job.finished_at.timestamp() if job.finished_at else None, job.sync, job.attempts, job.reason,
         job_result(job), to_us(job.cursor) if job.cursor else None, upto_seq, route))
