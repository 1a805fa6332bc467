"""Auto memory inside a shard: session ingest, the bounded job queue, its workers, one job's run.

Ingest (:meth:`ExtractionJobs.ingest`), under the shard's ingest lock:

1. validate the messages, complete them against the session's archive
   (:func:`memcore.extraction.events.identify`: resent messages are recognised, new ones get ids
   and, when they carry none, the time of receipt; a timestamp beyond the clock skew is a 422) and
   archive the session's user/assistant text turns (idempotent);
2. the delta = the session's archived turns not extracted yet that arrived after the bound of its
   unfinished jobs, in arrival order; nothing new → job ``skipped``; a session carrying ``external_context``
   with ``skip_external_context`` on → ``skipped``; a declining checker → ``skipped``. Skipped
   jobs call no extractor, write nothing and leave the cursor;
3. otherwise a ``queued`` job is recorded (durably, before the answer) with its delta bound
   ``upto_seq`` (the newest delta turn's arrival number) and takes its place in the user's job line;
4. the shard's queue holds at most ``extractor.queue_size`` waiting jobs: when it is full the
   ingest call runs its job itself (synchronous fallback) and answers with the finished job.

A job runs (worker thread, or the ingest call) when every earlier job of the same user is
finished: it re-reads the session's unextracted turns up to ``upto_seq`` (so a failed earlier job's
turns are retried), runs :func:`memcore.extraction.pipeline.run_extraction` and only then marks
them extracted and moves the cursor, durably. A job whose operations all applied (or were skipped by
policy) is ``done``; one where some failed is ``partial`` (the others are kept, the cursor moves,
``operations`` and ``errors`` say which failed and why, ``memcluster_operations_failed_total`` counts
them). Once the model calls are done and there are operations to
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

import asyncio
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from actors.context import ShardContext, ShardPart
from actors.queues import Ticket, UserQueues
from actors.shard_graph import graph_of
from actors.shard_telemetry import extractor_call, job_event, job_span
from memcore.errors import ConflictError, ExtractorError, FencedError, MemoryServiceError, NotFoundError
from memcore.extraction import checkers
from memcore.extraction.events import Event, ExtractionResult, Message, cursor_of, extractable, identify, parse_messages
from memcore.extraction.factory import build_episode_stage, build_extractor
from memcore.extraction.pipeline import EpisodeStage, ExtractionReport, run_extraction
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.fields import now_utc
from memcore.model import Entry, Operation, UserKey
from memcore.ports import Extractor
from memcore.records import JobReason, JobRecord, wait_job
from memcore.service import MemoryService
from memcore.validation import check_session, store_errors
from memcore.vocabulary import enabled_operations

log = logging.getLogger(__name__)
T = TypeVar("T")
_WRITES = frozenset({"add", "add_many", "update", "delete", "clear"})
IGNORED_PARTS = "ignored_content_parts"
"""Job count: content parts of the ingested messages that were not text (images, audio, files)."""


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

    def __init__(self, inner: Extractor, deadline: _Deadline, app: str = "", shard: int = 0) -> None:
        super().__init__(inner)
        self.deadline = deadline
        self.app, self.shard = app, shard

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        with extractor_call(self.app, self.shard):
            return self.deadline.bounded(extract, "the extractor")


class _TimedEpisodes:
    def __init__(self, inner: EpisodeStage, deadline: _Deadline) -> None:
        self.inner = inner
        self.deadline = deadline

    def run(self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None,
            others: Sequence[Operation] = ()) -> Any:
        return self.deadline.bounded(lambda: self.inner.run(delta, existing, now=now, others=others),
                                     "the assistant-episode stage")


class ExtractionJobs(ShardPart):
    """Ingest, queue, workers and job execution of one shard (see the module docstring)."""

    def __init__(
        self,
        ctx: ShardContext,
        *,
        extractor: Extractor | None = None,
        episodes: EpisodeStage | None = None,
        start: bool = True,
        on_fenced: Callable[[FencedError], None] | None = None,
    ) -> None:
        super().__init__(ctx)
        self._on_fenced = on_fenced
        cfg = ctx.settings.extractor
        shard = ctx.shard
        self.extractor: Extractor = extractor if extractor is not None else build_extractor(cfg)
        self.episodes = episodes if episodes is not None else build_episode_stage(cfg, self.extractor)
        self.policy = self.extractor.default_policy
        self.graph = graph_of(ctx)
        """Where the extractor's fact operations are written (the shard's knowledge graph)."""
        self.verbatim: Extractor = build_extractor(cfg.model_copy(update={"base_url": None}))
        """For apps whose policy says ``extractor: verbatim`` (their turns never reach a model)."""
        self.checker = checkers.from_settings(cfg)
        self.capacity = cfg.queue_size
        self.timeout_s = cfg.job_timeout_s
        self._order = UserQueues()
        self._queue: queue.Queue[tuple[JobRecord, Ticket] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._running = 0
        self._count_lock = threading.Lock()
        recovered = self.archive.jobs.requeue_unfinished()
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
                "jobs": self.archive.jobs.counts(), "oldest_unextracted": self.archive.events.oldest_unextracted()}

    # ------------------------------------------------------------ ingest
    def ingest(self, key: UserKey, session: str, events: Sequence[Message | Event | dict[str, Any]]) -> JobRecord:
        """Archive ``events`` and record a job: skipped, queued, or (queue full) run to its end."""
        session = check_session(session)
        messages = parse_messages(events)
        skew = timedelta(seconds=self.settings.extractor.clock_skew_s)
        if not self.settings.policy(key.app).archives:  # nothing is stored, not even the job
            now = now_utc()
            return JobRecord(job_id=new_job_id(self.shard), status="skipped", app=key.app, user=key.user,
                             session=session, created_at=now, finished_at=now, reason_code="memory_off",
                             reason=f"memory is off for app {key.app!r}: nothing was stored")
        with self._lock, store_errors("the event archive"):
            parsed = identify(messages, self.archive.events.arrived(key, session), now=now_utc(), max_skew=skew)
            self.archive.events.append(key, session, parsed)
            ignored = sum(m.ignored_parts for m in messages)
            job = self.archive.jobs.create(self._plan(key, session, ignored))
            job_event(job, self.shard)
            if job.status != "queued":
                return job
            ticket = self._order.reserve(key)
            if self._queue.qsize() < self.capacity:
                self._queue.put((job, ticket))
                return job
        return self._run(job, ticket, sync=True)

    def _plan(self, key: UserKey, session: str, ignored_parts: int = 0) -> JobRecord:
        now = now_utc()
        cursor = self.archive.sessions.last_extract_at(key, session)
        pending = self.archive.events.unextracted(key, session, after_seq=self.archive.jobs.pending_upto(key, session))
        todo = extractable(e for _, e in pending)
        counts = {"events": len(todo), **({IGNORED_PARTS: ignored_parts} if ignored_parts else {})}
        job = JobRecord(job_id=new_job_id(self.shard), status="queued", app=key.app, user=key.user,
                        session=session, created_at=now, cursor=cursor, counts=counts)
        skip: tuple[JobReason, str] | None = None
        if not self.settings.policy(key.app).extracts:  # archived (ingest checked), not extracted
            skip = "archive_only", f"memory is archive_only for app {key.app!r}: the turns are archived, not extracted"
        elif not todo:
            skip = "nothing_new", "no new user/assistant text after the cursor"
        elif self.settings.extractor.skip_external_context and self.archive.sessions.has_external_context(key, session):
            skip = "external_context", "the session carries external context (extractor.skip_external_context)"
        elif not self.checker(checkers.CheckContext.of(todo, cursor, now)):
            skip = "checker", f"a checker declined the extraction ({len(todo)} pending messages)"
        if skip is not None:
            return job.model_copy(update={"status": "skipped", "reason_code": skip[0], "reason": skip[1],
                                          "finished_at": now})
        return job.model_copy(update={"upto": cursor_of(todo), "upto_seq": pending[-1][0]})

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
            try:
                self._run(job, ticket, sync=False)
            except FencedError as exc:  # a newer incarnation holds the shard: its start re-queued the job
                self._stopping.set()
                if self._on_fenced is not None:
                    self._on_fenced(exc)
                return
            except MemoryServiceError:
                # the archive failed under the job (its database down): the record stays unfinished and is
                # re-queued on the next start; the session's next job extracts its turns. The worker lives on.
                log.exception("shard %d: job %s could not be recorded", self.shard, job.job_id)

    def _run(self, job: JobRecord, ticket: Ticket, *, sync: bool) -> JobRecord:
        with ExitStack() as stack:
            stack.callback(ticket.done)
            ticket.wait()
            with self._count_lock:
                self._running += 1
            stack.callback(self._finished_one)
            try:
                job = self.archive.jobs.start(job.job_id, sync=sync)
            except NotFoundError:  # its user was erased while it waited: it finds nothing to extract
                pass
            t0 = time.perf_counter()
            job_event(job, self.shard)
            stack.enter_context(job_span(job, self.shard))
            try:
                job = self._execute(job, stack)
            except Exception as exc:
                log.exception("shard %d: job %s crashed", self.shard, job.job_id)
                job = job.model_copy(update={"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
                                             "reason_code": "other",
                                             "cursor": self.archive.sessions.last_extract_at(job.key, job.session)})
            job = self.archive.jobs.finish(job)
            job_event(job, self.shard, time.perf_counter() - t0)
            return job  # recorded before the user's next job may start

    def _finished_one(self) -> None:
        with self._count_lock:
            self._running -= 1

    def _execute(self, job: JobRecord, stack: ExitStack) -> JobRecord:
        key = job.key
        cursor = self.archive.sessions.last_extract_at(key, job.session)
        pending = self.archive.events.unextracted(key, job.session, upto_seq=job.upto_seq)
        todo = extractable(e for _, e in pending)
        if not todo:
            return job.model_copy(update={"status": "done", "cursor": cursor, "counts": {"events": 0},
                                          "reason_code": "nothing_new",
                                          "reason": "nothing new after the cursor (an earlier job extracted it)"})

        def write_turn() -> MemoryService:
            """The user's write turn (held to the end of the job), then the service current now."""
            stack.enter_context(self.ctx.writing(key))
            if len(self.archive.events.visible(key, job.session, [e.id for e in todo])) < len({e.id for e in todo}):
                raise ConflictError("the turns being extracted were erased or deleted meanwhile: nothing is "
                                    "written", field="session")
            return self.served.get()

        deadline = _Deadline(self.timeout_s)
        app = self.settings.policy(key.app)
        verbatim = app.extractor == "verbatim"
        extractor, episodes = (self.verbatim, None) if verbatim else (self.extractor, self.episodes)
        try:
            report = run_extraction(
                self.served.get(), key, todo, session=job.session, write_turn=write_turn,
                extractor=_TimedExtractor(extractor, deadline, key.app, self.shard),
                policy=extractor.default_policy if verbatim else self.policy,
                episodes=_TimedEpisodes(episodes, deadline) if episodes is not None else None,
                enabled=enabled_operations(app.enabled_tools()), now=cursor_of(todo), graph=self.graph,
            )
        except MemoryServiceError as exc:
            reason = str(exc) if isinstance(exc, JobTimeout) else f"{type(exc).__name__}: {exc}"
            return job.model_copy(update={"status": "failed", "reason": reason, "reason_code": failure_code(exc),
                                          "errors": [reason], "cursor": cursor, "counts": {"events": len(todo)}})
        self.archive.events.mark_extracted(key, job.session, pending[-1][0])
        if report.cursor is not None:
            self.archive.sessions.set_last_extract_at(key, job.session, report.cursor)
        kept = {k: v for k, v in job.counts.items() if k == IGNORED_PARTS}
        failed = [r for r in report.results if r.status == "failed"]
        outcome: dict[str, Any] = {"status": "done"}
        if failed:
            outcome = {"status": "partial", "reason_code": "operations_failed",
                       "reason": f"{len(failed)} of {len(report.results)} operations failed (see operations)"}
        return job.model_copy(update={
            **outcome, "operations": [r.model_dump(mode="json") for r in report.results],
            "errors": report_errors(report), "counts": {**report.counts, **kept},
            "cursor": self.archive.sessions.last_extract_at(key, job.session),
        })

    # ------------------------------------------------------------ reads
    def job(self, job_id: str) -> JobRecord:
        return self.archive.jobs.get(job_id)

    def wait(self, job_id: str, timeout: float = 30.0) -> JobRecord:
        """Wait until the job is finished (tests, benchmarks; :func:`memcore.records.wait_job`, from a thread
        without an event loop); returns its last state."""

        async def fetch(job_id: str) -> JobRecord:
            return self.archive.jobs.get(job_id)

        return asyncio.run(wait_job(self.archive.jobs.get(job_id), fetch, timeout, poll_s=0.005))


def failure_code(exc: MemoryServiceError) -> JobReason:
    """The code of a job that failed with ``exc``: its deadline, the extractor, or anything else."""
    if isinstance(exc, JobTimeout):
        return "timeout"
    return "extractor_error" if isinstance(exc, ExtractorError) else "other"


def report_errors(report: ExtractionReport) -> list[str]:
    """The job's error list: failed operations, rejected tool calls, episode-stage and search failures."""
    errors = [f"operation {r.index} ({r.type}): {r.error}" for r in report.results if r.status == "failed"]
    errors += [f"rejected {r}" for r in report.rejected]
    errors += [f"assistant-episode stage failed: {e}" for e in report.episode_errors]
    errors += [f"fact operation {f.index} ({f.type}): {f.error}" for f in report.facts if f.status == "failed"]
    if report.existing_error:
        errors.append(f"existing-memory search failed, used the newest entries instead: {report.existing_error}")
    return errors
