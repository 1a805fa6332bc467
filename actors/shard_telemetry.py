"""What a shard records: writes, starts and keyword rebuilds, extraction jobs and extractor calls, and
a watcher thread that samples its gauges (queue depth, running jobs, cursor lag, entries, keyword docs).

The hooks in :mod:`actors.shard` and :mod:`actors.extraction_queue` are one line each and call into
here; everything goes through :mod:`memcore.telemetry` (a no-op until :func:`actors.metrics.install`).
Labels: app, shard, op, status, reason class, error kind; never a user, a session or text.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, TypeVar

from actors import metrics
from memcore import telemetry, tracing
from memcore.model import UserKey

F = TypeVar("F", bound=Callable[..., Any])
WATCH_INTERVAL_S = 5.0


def timed_write(op: str) -> Callable[[F], F]:
    """Decorate a ShardCore write ``(self, key, ...)``: count it and time it (store flush included)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(self: Any, key: UserKey, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            with tracing.span(tracing.WRITE_SPANS[op], memcluster__app=key.app, memcluster__shard=self.shard):
                result = fn(self, key, *args, **kwargs)
            labels = {"app": key.app, "shard": str(self.shard), "op": op}
            telemetry.count("memcluster_writes_total", 1.0, source="api", **labels)
            telemetry.observe("memcluster_write_duration_ms", (time.perf_counter() - t0) * 1e3, **labels)
            return result

        return inner  # type: ignore[return-value]

    return wrap


def spanned(name: str) -> Callable[[F], F]:
    """Decorate a ShardCore method ``(self, key, ...)`` with a span (memcluster.shard.search, memcluster.ingest)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(self: Any, key: UserKey, *args: Any, **kwargs: Any) -> Any:
            with tracing.span(name, memcluster__app=key.app, memcluster__shard=self.shard):
                return fn(self, key, *args, **kwargs)

        return inner  # type: ignore[return-value]

    return wrap


def traced_call(core: Any, carrier: dict[str, str] | None, method: str, *args: Any) -> Any:
    """Run ``core.method(*args)`` under the caller's trace context (the Ray actor hop)."""
    with tracing.attached(carrier):
        return getattr(core, method)(*args)


def shard_started(core: Any, rebuild_s: float) -> ShardWatch:
    """At a shard's start: install the recorder, count the start (and a rebuild), start the watcher."""
    metrics.install()
    shard = str(core.shard)
    telemetry.count("memcluster_shard_starts_total", 1.0, shard=shard)
    if core.rebuilt is not None:
        telemetry.count("memcluster_keyword_rebuilds_total", 1.0, shard=shard)
        telemetry.observe("memcluster_keyword_rebuild_duration_ms", rebuild_s * 1e3, shard=shard)
    return ShardWatch(core)


def sample(core: Any) -> dict[str, float]:
    """The shard's gauges now (also what ``memctl status`` shows through the shard's status)."""
    oldest = core.archive.events.oldest_unextracted()
    lag = max(0.0, time.time() - oldest) if oldest is not None else 0.0
    st = core.jobs.status()
    return {"queue_depth": float(st["queued"]), "jobs_running": float(st["running"]), "cursor_lag_seconds": lag}


class ShardWatch:
    """A daemon thread that sets the shard's gauges every :data:`WATCH_INTERVAL_S` (only when recording)."""

    def __init__(self, core: Any, interval: float = WATCH_INTERVAL_S) -> None:
        self.core = core
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if getattr(telemetry.recorder(), "enabled", False):
            self._thread = threading.Thread(target=self._loop, name=f"shard{core.shard}-metrics", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.once()
            except Exception:  # noqa: BLE001 - a closed store during shutdown; the next start samples again
                continue

    def once(self) -> None:
        shard = str(self.core.shard)
        for name, value in sample(self.core).items():
            telemetry.gauge(f"memcluster_{name}", value, shard=shard)
        status = self.core.status()
        telemetry.gauge("memcluster_shard_entries", float(status["entries"]), shard=shard)
        telemetry.gauge("memcluster_shard_keyword_docs", float(status["keyword_docs"]), shard=shard)

    def close(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------- extraction
_job_contexts: dict[str, Any] = {}
"""Trace context of each queued job (from its ingest), attached by the worker that runs it."""


def job_span(job: Any, shard: int) -> AbstractContextManager[Any]:
    """The job's span, a child of its ingest's (a shared null context when tracing is off)."""
    ctx = _job_contexts.pop(job.job_id, None)
    if not tracing.enabled():
        return tracing.span("memcluster.job")
    stack = ExitStack()
    stack.enter_context(tracing.attached(ctx))
    stack.enter_context(tracing.span("memcluster.job", memcluster__app=job.app, memcluster__shard=shard,
                                     memcluster__job_id=job.job_id))
    return stack


def job_event(job: Any, shard: int, duration_s: float | None = None) -> None:
    """A job reached ``job.status``: count it (reason as a class) and, when finished, time and log it."""
    labels = {"app": job.app, "shard": str(shard)}
    if job.status == "queued" and tracing.enabled():
        _job_contexts[job.job_id] = tracing.capture()
    telemetry.count("memcluster_jobs_total", 1.0, status=job.status, reason=telemetry.reason_label(job.reason_code),
                    **labels)
    if duration_s is not None:
        telemetry.observe("memcluster_job_duration_ms", duration_s * 1e3, status=job.status, **labels)
    for op in job.results if job.status in ("done", "partial") else ():
        if op.status == "applied" and op.action in tracing.WRITE_SPANS:
            telemetry.count("memcluster_writes_total", 1.0, op=str(op.action), source="extraction", **labels)
        elif op.status == "failed":
            telemetry.count("memcluster_operations_failed_total", 1.0, op=str(op.type), **labels)
    if job.finished:
        telemetry.log_event("job", job_id=job.job_id, app=job.app, shard=shard, status=job.status,
                            reason=telemetry.reason_label(job.reason_code), counts=dict(job.counts),
                            duration_ms=None if duration_s is None else round(duration_s * 1e3, 2),
                            detail=job.reason, errors=list(job.errors) or None)  # these two at DEBUG only


@contextmanager
def extractor_call(app: str, shard: int) -> Iterator[None]:
    """Time one extractor call; an error is counted by kind (timeout, bad_tool_call, http, other)."""
    t0 = time.perf_counter()
    labels = {"app": app, "shard": str(shard)}
    try:
        with tracing.span("memcluster.extractor_call", memcluster__app=app, memcluster__shard=shard):
            yield
    except BaseException as exc:
        telemetry.count("memcluster_extractor_errors_total", 1.0, kind=telemetry.error_kind(exc), **labels)
        raise
    finally:
        telemetry.observe("memcluster_extractor_call_duration_ms", (time.perf_counter() - t0) * 1e3, **labels)
