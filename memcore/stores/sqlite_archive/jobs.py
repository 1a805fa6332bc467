"""The job table on SQLite (:class:`memcore.archive_ports.JobRepository`): one row per ingest (status, times, delta
bound ``upto_seq``, result JSON, reason), numbered in ingest order (``seq``). It lives in the archive's
file, so a job's record commits with the turns it covers."""

from __future__ import annotations

import sqlite3
import time

from memcore.errors import NotFoundError
from memcore.model import UserKey
from memcore.records import FINISHED, UNFINISHED, JobRecord
from memcore.stores.archive_codec import JOB_COLUMNS, to_us
from memcore.stores.archive_codec import job_from_row as _job
from memcore.stores.archive_codec import job_result as _result
from memcore.stores.sqlite_archive.database import Database

_SELECT = f"SELECT {JOB_COLUMNS.format(user='user')} FROM jobs"


def _statuses(statuses: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in statuses)


class SqliteJobs:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, job: JobRecord) -> JobRecord:
        with self._db.tx() as db:
            cur = db.execute(
                "INSERT INTO jobs (id, app, user, session, status, upto_us, created_at, finished_at, sync, reason,"
                " result, cursor_us, upto_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job.job_id, job.app, job.user, job.session, job.status,
                 to_us(job.upto) if job.upto else None, job.created_at.timestamp(),
                 job.finished_at.timestamp() if job.finished_at else None, int(job.sync), job.reason,
                 _result(job), to_us(job.cursor) if job.cursor else None, job.upto_seq),
            )
        return job.model_copy(update={"seq": int(cur.lastrowid or 0)})

    def start(self, job_id: str, *, sync: bool = False) -> JobRecord:
        with self._db.tx() as db:
            db.execute("UPDATE jobs SET status = 'running', started_at = ?, attempts = attempts + 1,"
                       " sync = max(sync, ?) WHERE id = ?", (time.time(), int(sync), job_id))
        return self.get(job_id)

    def stored(self, job: JobRecord) -> JobRecord:
        rows = self._db.query(_SELECT + " WHERE id = ?", (job.job_id,))
        return _job(rows[0]) if rows else job

    def finish(self, job: JobRecord) -> JobRecord:
        with self._db.tx() as db:
            db.execute(
                "UPDATE jobs SET status = ?, finished_at = ?, reason = ?, result = ?, cursor_us = ? WHERE id = ?",
                (job.status, time.time(), job.reason, _result(job), to_us(job.cursor) if job.cursor else None,
                 job.job_id),
            )
        return self.stored(job)

    def requeue_unfinished(self) -> list[JobRecord]:
        with self._db.tx() as db:
            db.execute("UPDATE jobs SET status = 'queued' WHERE status = 'running'")
        return [_job(r) for r in self._db.query(_SELECT + " WHERE status = 'queued' ORDER BY seq")]

    def get(self, job_id: str) -> JobRecord:
        rows = self._db.query(_SELECT + " WHERE id = ?", (job_id,))
        if not rows:
            raise NotFoundError(f"job {job_id!r} not found", field="job_id")
        return _job(rows[0])

    def of_session(self, key: UserKey, session: str) -> list[JobRecord]:
        rows = self._db.query(_SELECT + " WHERE app = ? AND user = ? AND session = ? ORDER BY seq",
                              (key.app, key.user, session))
        return [_job(r) for r in rows]

    def pending_upto(self, key: UserKey, session: str) -> int | None:
        rows = self._db.query("SELECT max(upto_seq) FROM jobs WHERE app = ? AND user = ? AND session = ?"
                              f" AND status IN ({_statuses(UNFINISHED)})", (key.app, key.user, session))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def counts(self) -> dict[str, int]:
        return {s: n for s, n in self._db.query("SELECT status, count(*) FROM jobs GROUP BY status")}

    def prune(self, older_than_s: float) -> int:
        cutoff = time.time() - older_than_s
        with self._db.tx() as db:
            cur = db.execute(f"DELETE FROM jobs WHERE status IN ({_statuses(FINISHED)}) AND created_at < ?",
                             (cutoff,))
        return int(cur.rowcount)


def user_jobs(db: Database, key: UserKey) -> list[JobRecord]:
    """Every job of ``key``, in ingest order (moving a user: :mod:`memcore.stores.sqlite_archive.transfer`)."""
    return [_job(r) for r in db.query(_SELECT + " WHERE app = ? AND user = ? ORDER BY seq", (key.app, key.user))]


def insert_job(tx: sqlite3.Connection, job: JobRecord, upto_seq: int | None) -> None:
    """Insert ``job`` whole (a new ingest number; ``upto_seq`` as the target file numbers the user's turns)."""
    tx.execute(
        "INSERT INTO jobs (id, app, user, session, status, upto_us, created_at, started_at, finished_at, sync,"
        " attempts, reason, result, cursor_us, upto_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (job.job_id, job.app, job.user, job.session, job.status, to_us(job.upto) if job.upto else None,
         job.created_at.timestamp(), job.started_at.timestamp() if job.started_at else None,
         job.finished_at.timestamp() if job.finished_at else None, int(job.sync), job.attempts, job.reason,
         _result(job), to_us(job.cursor) if job.cursor else None, upto_seq))
