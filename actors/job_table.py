"""The shard's job table: one row per ingest (status queued | running | done | failed | skipped, times,
delta bound ``upto_seq``, result JSON, reason), numbered in ingest order (``seq``). It lives in the
archive's SQLite file (:class:`actors.archive.SqliteArchive` mixes :class:`JobTable` in), so a job's
record commits with the turns it covers."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from actors.timestamps import from_epoch, from_us, to_us
from memcore.errors import NotFoundError
from memcore.model import UserKey

JobStatus = Literal["queued", "running", "done", "failed", "skipped"]
UNFINISHED: tuple[JobStatus, ...] = ("queued", "running")


class JobRecord(BaseModel):
    """One ingest and what became of it (what ``GET /v1/jobs/{id}`` shows)."""

    job_id: str
    seq: int = 0
    """Ingest order within the shard (1, 2, 3, ...)."""
    status: JobStatus
    app: str
    user: str
    session: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    sync: bool = False
    """True when the queue was full and the ingest request ran the job itself."""
    attempts: int = 0
    """How many times a worker started it (more than 1 after a shard restart)."""
    upto: datetime | None = None
    """The newest timestamp among the turns this job extracts."""
    upto_seq: int | None = None
    """The delta bound fixed at ingest: the job extracts the session's unextracted turns that arrived
    up to this arrival number."""
    reason: str | None = None
    """Why it was skipped or failed."""
    operations: list[dict[str, Any]] = Field(default_factory=list)
    """Per-operation results (index, type, status applied|skipped|failed, action, ids, reason, error)."""
    errors: list[str] = Field(default_factory=list)
    """Everything that went wrong: the job error, failed operations, rejected tool calls, ..."""
    counts: dict[str, int] = Field(default_factory=dict)
    cursor: datetime | None = None
    """The session's ``last_extract_at`` when the job finished (unchanged unless it is done)."""

    @property
    def key(self) -> UserKey:
        return UserKey(app=self.app, user=self.user)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed", "skipped")


class JobTable:
    """The job rows' reads and writes, over the archive's connection."""

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def create_job(self, job: JobRecord) -> JobRecord:
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO jobs (id, app, user, session, status, upto_us, created_at, finished_at, sync, reason,"
                " result, cursor_us, upto_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job.job_id, job.app, job.user, job.session, job.status,
                 to_us(job.upto) if job.upto else None, job.created_at.timestamp(),
                 job.finished_at.timestamp() if job.finished_at else None, int(job.sync), job.reason,
                 _result(job), to_us(job.cursor) if job.cursor else None, job.upto_seq),
            )
        return job.model_copy(update={"seq": int(cur.lastrowid or 0)})

    def start_job(self, job_id: str, *, sync: bool = False) -> JobRecord:
        with self.transaction() as db:
            db.execute("UPDATE jobs SET status = 'running', started_at = ?, attempts = attempts + 1,"
                       " sync = max(sync, ?) WHERE id = ?", (time.time(), int(sync), job_id))
        return self.job(job_id)

    def job_or(self, job: JobRecord) -> JobRecord:
        """The stored state of ``job``, or ``job`` itself when its record is gone (its user was erased)."""
        rows = self.query(_JOB_SELECT + " WHERE id = ?", (job.job_id,))
        return _job(rows[0]) if rows else job

    def finish_job(self, job: JobRecord) -> JobRecord:
        """Store the final state of ``job`` (status, reason, result, cursor) and its finish time."""
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET status = ?, finished_at = ?, reason = ?, result = ?, cursor_us = ? WHERE id = ?",
                (job.status, time.time(), job.reason, _result(job), to_us(job.cursor) if job.cursor else None,
                 job.job_id),
            )
        return self.job_or(job)

    def requeue_unfinished(self) -> list[JobRecord]:
        """Jobs a dead shard left queued or running, back to ``queued``, in ingest order."""
        with self.transaction() as db:
            db.execute("UPDATE jobs SET status = 'queued' WHERE status = 'running'")
        rows = self.query(_JOB_SELECT + " WHERE status = 'queued' ORDER BY seq")
        return [_job(r) for r in rows]

    def job(self, job_id: str) -> JobRecord:
        rows = self.query(_JOB_SELECT + " WHERE id = ?", (job_id,))
        if not rows:
            raise NotFoundError(f"job {job_id!r} not found", field="job_id")
        return _job(rows[0])

    def session_jobs(self, key: UserKey, session: str) -> list[JobRecord]:
        """Every recorded job of one session, in ingest order."""
        rows = self.query(_JOB_SELECT + " WHERE app = ? AND user = ? AND session = ? ORDER BY seq",
                           (key.app, key.user, session))
        return [_job(r) for r in rows]

    def pending_upto(self, key: UserKey, session: str) -> int | None:
        """The highest arrival bound of the session's unfinished jobs (the turns they will extract)."""
        rows = self.query("SELECT max(upto_seq) FROM jobs WHERE app = ? AND user = ? AND session = ?"
                           " AND status IN ('queued', 'running')", (key.app, key.user, session))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def job_counts(self) -> dict[str, int]:
        return {s: n for s, n in self.query("SELECT status, count(*) FROM jobs GROUP BY status")}

    def prune_jobs(self, older_than_s: float) -> int:
        """Delete finished job records older than ``older_than_s`` seconds."""
        cutoff = time.time() - older_than_s
        with self.transaction() as db:
            cur = db.execute("DELETE FROM jobs WHERE status IN ('done', 'failed', 'skipped') AND created_at < ?",
                             (cutoff,))
        return int(cur.rowcount)


_JOB_SELECT = ("SELECT seq, id, app, user, session, status, upto_us, created_at, started_at, finished_at, sync,"
               " attempts, reason, result, cursor_us, upto_seq FROM jobs")


def _result(job: JobRecord) -> str:
    return json.dumps({"operations": job.operations, "errors": job.errors, "counts": job.counts})


def _job(row: tuple[Any, ...]) -> JobRecord:
    (seq, jid, app, user, session, status, upto, created, started, finished, sync, attempts, reason, result, cur,
     upto_seq) = row
    data = json.loads(result) if result else {}
    return JobRecord(
        job_id=jid, seq=seq, status=status, app=app, user=user, session=session,
        created_at=datetime.fromtimestamp(created, UTC),
        started_at=from_epoch(started), finished_at=from_epoch(finished), sync=bool(sync), attempts=attempts,
        upto=from_us(upto), reason=reason, operations=data.get("operations", []), errors=data.get("errors", []),
        counts=data.get("counts", {}), cursor=from_us(cur), upto_seq=upto_seq,
    )
