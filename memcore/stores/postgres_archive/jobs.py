"""The job table on PostgreSQL (:class:`memcore.archive_ports.JobRepository`): one row per ingest, numbered in
ingest order (``seq``, an identity column). The calls over every user (``requeue_unfinished``,
``counts``, ``prune``) cover the users of this shard (:class:`memcore.stores.postgres_archive.owner.Owner`)."""

from __future__ import annotations

import time

from memcore.errors import NotFoundError
from memcore.model import UserKey
from memcore.records import FINISHED, UNFINISHED, JobRecord
from memcore.stores.archive_codec import JOB_COLUMNS, job_from_row, job_result, to_us
from memcore.stores.postgres_archive.database import PgDatabase
from memcore.stores.postgres_archive.owner import Owner

_SELECT = f"SELECT {JOB_COLUMNS.format(user='user_id')} FROM jobs"


class PgJobs:
    def __init__(self, db: PgDatabase, owner: Owner) -> None:
        self._db = db
        self._owner = owner

    def create(self, job: JobRecord) -> JobRecord:
        rows = self._db.query(
            "INSERT INTO jobs (id, app, user_id, session, status, upto_us, created_at, finished_at, sync, reason,"
            " result, cursor_us, upto_seq, route) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING seq",
            (job.job_id, job.app, job.user, job.session, job.status, to_us(job.upto) if job.upto else None,
             job.created_at.timestamp(), job.finished_at.timestamp() if job.finished_at else None, job.sync,
             job.reason, job_result(job), to_us(job.cursor) if job.cursor else None, job.upto_seq,
             Owner.route(UserKey(app=job.app, user=job.user))))
        return job.model_copy(update={"seq": int(rows[0][0])})

    def start(self, job_id: str, *, sync: bool = False) -> JobRecord:
        with self._db.tx() as cur:
            cur.execute("UPDATE jobs SET status = 'running', started_at = %s, attempts = attempts + 1,"
                        " sync = sync OR %s WHERE id = %s", (time.time(), sync, job_id))
        return self.get(job_id)

    def stored(self, job: JobRecord) -> JobRecord:
        rows = self._db.read(_SELECT + " WHERE id = %s", (job.job_id,))
        return job_from_row(rows[0]) if rows else job

    def finish(self, job: JobRecord) -> JobRecord:
        with self._db.tx() as cur:
            cur.execute(
                "UPDATE jobs SET status = %s, finished_at = %s, reason = %s, result = %s, cursor_us = %s WHERE id = %s",
                (job.status, time.time(), job.reason, job_result(job), to_us(job.cursor) if job.cursor else None,
                 job.job_id))
        return self.stored(job)

    def requeue_unfinished(self) -> list[JobRecord]:
        with self._db.tx() as cur:
            cur.execute(f"UPDATE jobs SET status = 'queued' WHERE status = 'running' AND {self._owner.where()}")
            cur.execute(_SELECT + f" WHERE status = 'queued' AND {self._owner.where()} ORDER BY seq")
            return [job_from_row(r) for r in cur.fetchall()]

    def get(self, job_id: str) -> JobRecord:
        rows = self._db.read(_SELECT + " WHERE id = %s", (job_id,))
        if not rows:
            raise NotFoundError(f"job {job_id!r} not found", field="job_id")
        return job_from_row(rows[0])

    def of_session(self, key: UserKey, session: str) -> list[JobRecord]:
        rows = self._db.read(_SELECT + " WHERE app = %s AND user_id = %s AND session = %s ORDER BY seq",
                              (key.app, key.user, session))
        return [job_from_row(r) for r in rows]

    def pending_upto(self, key: UserKey, session: str) -> int | None:
        rows = self._db.read("SELECT max(upto_seq) FROM jobs WHERE app = %s AND user_id = %s AND session = %s"
                              " AND status = ANY(%s)", (key.app, key.user, session, list(UNFINISHED)))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def counts(self) -> dict[str, int]:
        return {s: int(n) for s, n in self._db.read(
            f"SELECT status, count(*) FROM jobs WHERE {self._owner.where()} GROUP BY status")}

    def prune(self, older_than_s: float) -> int:
        with self._db.tx() as cur:
            cur.execute(f"DELETE FROM jobs WHERE status = ANY(%s) AND created_at < %s AND {self._owner.where()}",
                        (list(FINISHED), time.time() - older_than_s))
            return cur.rowcount
