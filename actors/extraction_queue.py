"""Auto memory inside a shard: session ingest, the bounded job queue, its workers, one job's run.

Ingest (:meth:`ExtractionJobs.ingest`), under the shard's ingest lock:

1. validate the events and archive the session's user/assistant text turns (idempotent);
2. the delta = archived turns after ``max(durable cursor, newest bound of the session's
   unfinished jobs)``; nothing new → job ``skipped``; a session carrying ``external_context``
   with ``skip_external_context`` on → ``skipped``; a declining checker → ``skipped``. Skipped
   jobs call no extractor, write nothing and leave the cursor;
3. otherwise a ``queued`` job is recorded (durably, before the answer) with its delta bound
   ``upto`` (the newest delta event) and takes its place in the user's job line;
4. the shard's queue holds at most ``extractor.queue_size`` waiting jobs: when it is full the
   ingest call runs its job itself (synchronous fallback) and answers with the finished job.

A job runs (worker thread, or the ingest call) when every earlier job of the same user is
finished: it re-reads the delta after the *current* durable cursor up to ``upto`` (so a failed
earlier job's turns are retried), runs :func:`memcore.extraction.pipeline.run_extraction` and
only then moves the cursor, durably. Once the model calls are done and there are operations to
apply, the job takes the user's write turn in the shard (held to the end of the job) and writes
into the service current then, so the job's operations form one block in the user's FIFO
between API writes. The job deadline (``extractor.job_timeout_s``) bounds loading plus the
model calls: the extractor runs in a helper thread that is abandoned at the deadline (it
writes nothing), the job is ``failed`` and the cursor stays. Applying the operations, which
starts only before the deadline, is never interrupted halfway.

Jobs live in the shard, not in the request: a client that disconnects does not cancel an
accepted job (a synchronous fallback runs in the shard's call thread — on Ray one of the
actor's ``max_concurrency`` threads — whatever happens to the caller), and a restarted shard
re-queues jobs left queued or running (their turns are archived) in ingest order, so no
accepted job is lost (a job that died mid-way runs again: re-adding the same content is
idempotent).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from datetime import datetime
from typing import Any, TypeVar, cast

from actors.archive import JobRecord, SqliteArchive
from actors.current import CurrentService
from actors.queues import Ticket, UserQueues
from memcore.errors import ExtractorError, MemoryServiceError
from memcore.extraction import checkers
from memcore.extraction.events import Event, ExtractionResult, cursor_of, delta, parse_events
from memcore.extraction.factory import build_episode_stage, build_extractor
from memcore.extraction.pipeline import EpisodeStage, ExtractionReport, run_extraction
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.model import Entry, Operation, UserKey, now_utc
from memcore.ports import Extractor
from memcore.service import MemoryService
from memcore.settings import Settings, ToolMode
from memcore.validation import check_session, store_errors
from memcore.vocabulary import enabled_operations

log = logging.getLogger(__name__)
T = TypeVar("T")
Writing = Callable[[UserKey], AbstractContextManager[Any]]


class JobTimeout(ExtractorError):
    """The job passed its deadline before its operations were applied (nothing was written)."""


def new_job_id(shard: int) -> str:
    """``<shard>-<32 hex>``: the shard number routes ``GET /v1/jobs/{id}``."""
    return f"{shard}-{uuid.uuid4().hex}"


def job_shard(job_id: str) -> int | None:
    """The shard number encoded in a job id, or None when the id is malformed."""
    head, sep, tail = job_id.partition("-")
    if not sep or not head.isdigit() or len(head) > 4 or len(tail) != 32:
        return None
    try:
        int(tail, 16)
    except ValueError:
        return None
    return int(head)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def bounded(self, fn: Callable[[], T], what: str) -> T:
        """``fn()`` in a helper thread, waited on up to the deadline (the thread is abandoned after)."""
        box: dict[str, Any] = {}
        finished = threading.Event()

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting job
                box["error"] = exc
            finally:
                finished.set()

        threading.Thread(target=target, name=f"job-{what}", daemon=True).start()
        if not finished.wait(max(0.0, self.remaining())):
            raise JobTimeout(f"the job timed out after {self.seconds:g} s (in {what}); the cursor was not moved",
                             field="job_timeout_s")
        if "error" in box:
            raise box["error"]
        return cast(T, box["value"])


class _TimedExtractor(ExtractorWrapper):
    """The extractor bounded by the job deadline (its capabilities are the inner extractor's)."""

    def __init__(self, inner: Extractor, deadline: _Deadline) -> None:
        super().__init__(inner)
        self.deadline = deadline

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        return self.deadline.bounded(extract, "the extractor")


class _TimedEpisodes:
    def __init__(self, inner: EpisodeStage, deadline: _Deadline) -> None:
        self.inner = inner
        self.deadline = deadline

    def run(self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None,
            others: Sequence[Operation] = ()) -> Any:
        return self.deadline.bounded(lambda: self.inner.run(delta, existing, now=now, others=others),
                                     "the assistant-episode stage")


class ExtractionJobs:
    """Ingest, queue, workers and job execution of one shard (see the module docstring)."""

    def __init__(
        self,
        current: CurrentService,
        archive: SqliteArchive,
        settings: Settings,
        shard: int,
        writing: Writing,
        *,
        extractor: Extractor | None = None,
        episodes: EpisodeStage | None = None,
        start: bool = True,
    ) -> None:
        cfg = settings.extractor
        self.current = current
        self.archive = archive
        self.settings = settings
        self.shard = shard
        self._writing = writing
        self.extractor: Extractor = extractor if extractor is not None else build_extractor(cfg)
        self.episodes = episodes if episodes is not None else build_episode_stage(cfg, self.extractor)
        self.policy = self.extractor.default_policy
        self.enabled = enabled_operations(settings.tools.enabled_tools(ToolMode.AUTO))
        self.checker = checkers.from_settings(cfg)
        self.capacity = cfg.queue_size
        self.timeout_s = cfg.job_timeout_s
        self._order = UserQueues()
        self._queue: queue.Queue[tuple[JobRecord, Ticket] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._running = 0
        self._count_lock = threading.Lock()
        recovered = archive.requeue_unfinished()
        for job in recovered:  # before any new ingest: their places in line come first
            self._queue.put((job, self._order.reserve(job.key)))
        self.recovered = len(recovered)
        if recovered:
            log.warning("shard %d: re-queued %d unfinished extraction jobs", shard, len(recovered))
        self._workers = [threading.Thread(target=self._work, name=f"shard{shard}-extract-{i}", daemon=True)
                         for i in range(cfg.workers)]
        if start:
            self.start()

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for w in self._workers:
            if not w.is_alive():
                w.start()

    def close(self, timeout: float | None = None) -> None:
        """Stop the workers; waiting jobs stay ``queued`` in the archive for the next start."""
        self._stopping.set()
        for _ in self._workers:
            self._queue.put(None)
        wait = self.timeout_s + 5 if timeout is None else timeout
        for w in self._workers:
            if w.is_alive():
                w.join(wait)

    def status(self) -> dict[str, Any]:
        with self._count_lock:
            running = self._running
        return {"extractor": type(self.extractor).__name__, "policy": self.policy, "queued": self._queue.qsize(),
                "running": running, "capacity": self.capacity, "recovered_on_start": self.recovered,
                "jobs": self.archive.job_counts()}

    # ------------------------------------------------------------ ingest
    def ingest(self, key: UserKey, session: str, events: Sequence[Event | dict[str, Any]]) -> JobRecord:
        """Archive ``events`` and record a job: skipped, queued, or (queue full) run to its end."""
        session = check_session(session)
        parsed = parse_events(events)
        with self._lock, store_errors("the event archive"):
            self.archive.append(key, session, parsed)
            job = self.archive.create_job(self._plan(key, session))
            if job.status != "queued":
                return job
            ticket = self._order.reserve(key)
            if self._queue.qsize() < self.capacity:
                self._queue.put((job, ticket))
                return job
        return self._run(job, ticket, sync=True)

    def _plan(self, key: UserKey, session: str) -> JobRecord:
        now = now_utc()
        cursor = self.archive.last_extract_at(key, session)
        pending = self.archive.pending_upto(key, session)
        base = max((t for t in (cursor, pending) if t is not None), default=None)
        todo = delta(self.archive.read(key, session), base)
        job = JobRecord(job_id=new_job_id(self.shard), status="queued", app=key.app, user=key.user,
                        session=session, created_at=now, cursor=cursor, counts={"events": len(todo)})
        reason: str | None = None
        if not todo:
            reason = "no new user/assistant text after the cursor"
        elif self.settings.extractor.skip_external_context and self.archive.has_external_context(key, session):
            reason = "the session carries external context (extractor.skip_external_context)"
        elif not self.checker(checkers.CheckContext.of(todo, base, now)):
            reason = f"a checker declined the extraction ({len(todo)} pending messages)"
        if reason is not None:
            return job.model_copy(update={"status": "skipped", "reason": reason, "finished_at": now})
        return job.model_copy(update={"upto": cursor_of(todo)})

    # ------------------------------------------------------------ run
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, ticket = item
            if self._stopping.is_set():
                ticket.done()  # stays queued in the archive; re-queued on the next start
                continue
            self._run(job, ticket, sync=False)

    def _run(self, job: JobRecord, ticket: Ticket, *, sync: bool) -> JobRecord:
        with ExitStack() as stack:
            stack.callback(ticket.done)
            ticket.wait()
            with self._count_lock:
                self._running += 1
            stack.callback(self._finished_one)
            job = self.archive.start_job(job.job_id, sync=sync)
            try:
                job = self._execute(job, stack)
            except Exception as exc:
                log.exception("shard %d: job %s crashed", self.shard, job.job_id)
                job = job.model_copy(update={"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                                             "cursor": self.archive.last_extract_at(job.key, job.session)})
            return self.archive.finish_job(job)  # recorded before the user's next job may start

    def _finished_one(self) -> None:
        with self._count_lock:
            self._running -= 1

    def _execute(self, job: JobRecord, stack: ExitStack) -> JobRecord:
        key = job.key
        cursor = self.archive.last_extract_at(key, job.session)
        todo = [e for e in delta(self.archive.read(key, job.session), cursor)
                if job.upto is None or e.timestamp <= job.upto]
        if not todo:
            return job.model_copy(update={"status": "done", "cursor": cursor, "counts": {"events": 0},
                                          "reason": "nothing new after the cursor (an earlier job extracted it)"})

        def write_turn() -> MemoryService:
            """The user's write turn (held to the end of the job), then the service current now."""
            stack.enter_context(self._writing(key))
            return self.current.get()

        deadline = _Deadline(self.timeout_s)
        try:
            report = run_extraction(
                self.current.get(), key, todo, write_turn=write_turn,
                extractor=_TimedExtractor(self.extractor, deadline), policy=self.policy,
                episodes=_TimedEpisodes(self.episodes, deadline) if self.episodes is not None else None,
                enabled=self.enabled, now=cursor_of(todo),
            )
        except MemoryServiceError as exc:
            reason = str(exc) if isinstance(exc, JobTimeout) else f"{type(exc).__name__}: {exc}"
            return job.model_copy(update={"status": "failed", "reason": reason, "errors": [reason], "cursor": cursor,
                                          "counts": {"events": len(todo)}})
        if report.cursor is not None:
            self.archive.set_last_extract_at(key, job.session, report.cursor)
        return job.model_copy(update={
            "status": "done", "operations": [r.model_dump(mode="json") for r in report.results],
            "errors": report_errors(report), "counts": report.counts,
            "cursor": self.archive.last_extract_at(key, job.session),
        })

    # ------------------------------------------------------------ reads
    def job(self, job_id: str) -> JobRecord:
        return self.archive.job(job_id)

    def wait(self, job_id: str, timeout: float = 30.0) -> JobRecord:
        """Poll until the job is finished (tests, benchmarks); returns its last state."""
        deadline = time.monotonic() + timeout
        job = self.archive.job(job_id)
        while not job.finished and time.monotonic() < deadline:
            time.sleep(0.005)
            job = self.archive.job(job_id)
        return job


def report_errors(report: ExtractionReport) -> list[str]:
    """The job's error list: failed operations, rejected tool calls, episode-stage and search failures."""
    errors = [f"operation {r.index} ({r.type}): {r.error}" for r in report.results if r.status == "failed"]
    errors += [f"rejected {r}" for r in report.rejected]
    errors += [f"assistant-episode stage failed: {e}" for e in report.episode_errors]
    if report.existing_error:
        errors.append(f"existing-memory search failed, used the newest entries instead: {report.existing_error}")
    return errors
