"""What every engine of the event archive (:class:`memcore.archive_ports.EventArchive`) stores the same way.

- time: exact integer microseconds since the epoch (cursor comparisons need exactness a float does not
  give), and float epoch seconds for job times;
- a turn's state as a small integer (:data:`HIDDEN_CODES`);
- a job's row: its columns in :data:`JOB_COLUMNS` order, the result as JSON (:func:`job_result`,
  :func:`job_from_row`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memcore.fields import utc
from memcore.records import JobRecord, TurnState

MAX_QUERY_TOKENS = 64
"""Distinct query tokens a session-recall search uses (the rest are ignored)."""

VISIBLE, HIDDEN, REMOVED = 0, 1, 2
HIDDEN_CODES: dict[int, TurnState] = {VISIBLE: "visible", HIDDEN: "hidden", REMOVED: "removed"}

JOB_COLUMNS = ("seq, id, app, {user}, session, status, upto_us, created_at, started_at, finished_at, sync,"
               " attempts, reason, result, cursor_us, upto_seq")
"""The columns :func:`job_from_row` reads, in order (``{user}``: the engine's name of the user column)."""


def to_us(value: datetime) -> int:
    """Microseconds since the epoch (exact, for cursor comparisons)."""
    delta = utc(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def at_us(value: int) -> datetime:
    """The inverse of :func:`to_us`."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def from_us(value: int | None) -> datetime | None:
    return None if value is None else at_us(value)


def from_epoch(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def job_result(job: JobRecord) -> str:
    """The JSON a job row keeps of its result."""
    return json.dumps({"operations": job.operations, "errors": job.errors, "counts": job.counts,
                       "reason_code": job.reason_code})


def job_from_row(row: Sequence[Any]) -> JobRecord:
    """A job from its row (:data:`JOB_COLUMNS`)."""
    (seq, jid, app, user, session, status, upto, created, started, finished, sync, attempts, reason, result, cur,
     upto_seq) = row
    data = json.loads(result) if result else {}
    return JobRecord(
        job_id=jid, seq=seq, status=status, app=app, user=user, session=session,
        created_at=datetime.fromtimestamp(created, UTC),
        started_at=from_epoch(started), finished_at=from_epoch(finished), sync=bool(sync), attempts=attempts,
        upto=from_us(upto), reason=reason, reason_code=data.get("reason_code"),
        operations=data.get("operations", []), errors=data.get("errors", []),
        counts=data.get("counts", {}), cursor=from_us(cur), upto_seq=upto_seq,
    )
