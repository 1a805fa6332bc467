"""The records the event archive stores and answers with (:class:`memcore.archive_ports.EventArchive`): ingest
jobs, recall hits and archived turns. Pure data, no engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, TypeAdapter

from memcore.graph import DiaryEntry, Entity, Fact
from memcore.model import OperationType, UserKey
from memcore.policy.plan import Action

JobStatus = Literal["queued", "running", "done", "partial", "failed", "skipped"]
"""A job's state. ``done``: extracted, every operation applied or skipped by policy; ``partial``: extracted
(the cursor moved) but at least one operation failed (:attr:`JobRecord.operations` says which, and
:attr:`JobRecord.errors` why); ``failed``: nothing written, the cursor unchanged (the turns are extracted
again by the session's next job); ``skipped``: a no-op (:attr:`JobRecord.reason_code` says why)."""
UNFINISHED: tuple[JobStatus, ...] = ("queued", "running")
"""Statuses of a job that has still to run (or to finish running)."""
FINISHED: tuple[JobStatus, ...] = ("done", "partial", "failed", "skipped")
JobReason = Literal["memory_off", "archive_only", "nothing_new", "external_context", "checker", "timeout",
                    "extractor_error", "operations_failed", "other"]
"""Why a job was skipped, partial or failed, as a code (set where the reason is produced; :attr:`JobRecord.reason` keeps
the English message for people). Metrics label jobs by it (never by the text)."""
JOB_POLL_S = 0.05
"""How often :func:`wait_job` asks for a job's state."""

TurnState = Literal["visible", "hidden", "removed"]
"""An archived turn's state: ``hidden`` by a soft delete (kept, but no read path, recall or
re-extraction sees it), ``removed`` by a hard delete or a clear (text blanked, recall index row
dropped; the id stays so that a resend of the same event is still recognised)."""


class Turn(NamedTuple):
    """One archived turn of a user: an event id is unique within its session only."""

    session: str
    event_id: str


class ArchivedTurn(NamedTuple):
    """A turn the archive holds, and its state."""

    session: str
    event_id: str
    state: TurnState

    @property
    def turn(self) -> Turn:
        return Turn(self.session, self.event_id)

    @property
    def visible(self) -> bool:
        return self.state == "visible"


class RecallHit(BaseModel):
    """One archived turn of another session."""

    session: str
    event_id: str
    role: str
    content: str
    timestamp: datetime
    score: float = Field(description="BM25 relevance (higher is better).")


class OpResult(BaseModel):
    """What happened to one proposed operation (an item of :attr:`JobRecord.operations`)."""

    index: int
    type: OperationType
    """The proposed type."""
    status: Literal["applied", "skipped", "failed"]
    action: Action | None = None
    """What the policy decided (``add`` for an update turned into an add, ...)."""
    memory_id: str | None = None
    """The entry the operation was aimed at (proposed, or chosen by reconcile)."""
    effective_id: str | None = None
    """The entry that holds the content afterwards (after id rotation; the duplicate when skipped)."""
    reason: str | None = None
    error: str | None = None


_OP_RESULTS = TypeAdapter(list[OpResult])


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
    """Why it was skipped, partial or failed (for people; :attr:`reason_code` says it as a code)."""
    reason_code: JobReason | None = None
    """:attr:`reason` as a :data:`JobReason` code (None when there is no reason)."""
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
        return self.status in FINISHED

    @property
    def failed_operations(self) -> list[OpResult]:
        """The operations that failed (a ``partial`` job has at least one)."""
        return [r for r in self.results if r.status == "failed"]

    @property
    def results(self) -> list[OpResult]:
        """:attr:`operations` as typed results (the record keeps them as the JSON the archive stores)."""
        return _OP_RESULTS.validate_python(self.operations)


class TurnRow(NamedTuple):
    """One archived turn with everything the archive keeps of it (:class:`UserRows`)."""

    session: str
    event_id: str
    role: str
    content: str
    timestamp: datetime
    external_context: bool
    arrival: int
    """Its arrival number in the archive it came from (only the order among the user's turns counts)."""
    extracted: bool
    state: TurnState


class SessionRow(NamedTuple):
    """One session's cursor and external-context mark (:class:`UserRows`)."""

    session: str
    last_extract_at: datetime | None
    external_context: bool
    updated_at: float


class UserRows(NamedTuple):
    """Every row an archive holds of one user, engine-neutral: what
    :meth:`memcore.archive_ports.EventArchive.export_user` reads and
    :meth:`~memcore.archive_ports.EventArchive.import_users` writes into another archive (moving a user to
    another shard, ``memctl reshard``). Turns are in arrival order, jobs in ingest order; ``sequence`` is
    the user's write counter (None: never taken); the knowledge graph (every fact version, retired ones
    included, and the entities with their aliases) and the diary."""

    key: UserKey
    turns: tuple[TurnRow, ...]
    sessions: tuple[SessionRow, ...]
    jobs: tuple[JobRecord, ...]
    access: tuple[tuple[str, float], ...]
    sequence: int | None
    facts: tuple[Fact, ...] = ()
    entities: tuple[Entity, ...] = ()
    diary: tuple[DiaryEntry, ...] = ()


async def wait_job(job: JobRecord, fetch: Callable[[str], Awaitable[JobRecord]], timeout_s: float,
                   poll_s: float = JOB_POLL_S) -> JobRecord:
    """Ask ``fetch(job_id)`` every ``poll_s`` until ``job`` is finished or ``timeout_s`` passed; the last state
    seen (still unfinished after the timeout). The one loop that waits for a job (the ingress, the Mem0 API
    and the shard's own waits go through it)."""
    deadline = time.monotonic() + timeout_s
    while not job.finished and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        job = await fetch(job.job_id)
    return job
