"""Telemetry hooks: the metric table (one home for every ``memcluster_*`` name), a recorder that
does nothing until one is installed, and the one structured JSON log line per request and per job.

memcore never imports ray: the code here and the code that calls it (memcore, actors) only see the
:class:`Recorder` protocol. ``actors.metrics.install()`` puts the ``ray.util.metrics`` implementation
in place inside a Ray process (shard actor, Serve replica); a plain process keeps :class:`NullRecorder`,
so a hook costs one attribute lookup and a no-op call.

Labels are bounded: ``app`` (apps are configuration), ``shard``, route templates, status classes,
reasons and error kinds. No metric may carry a user id, a session id or any text: :data:`FORBIDDEN`
names the label keys refused when the table is declared; a job's reason is labelled by its code
(:func:`reason_label`), never by its text.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Kind = Literal["counter", "histogram", "gauge"]
FORBIDDEN = frozenset({"user", "user_id", "session", "session_id", "text", "memory", "query", "job_id"})
MS_BUCKETS: tuple[float, ...] = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
"""Latency buckets in milliseconds, from 1 ms."""
COUNT_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    description: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = field(default=MS_BUCKETS)

    def __post_init__(self) -> None:
        if any(b <= 0 for b in self.buckets):
            raise ValueError(f"metric {self.name!r}: histogram boundaries must be positive (Ray's rule)")
        bad = FORBIDDEN.intersection(self.labels)
        if bad or not self.name.startswith("memcluster_"):
            raise ValueError(f"metric {self.name!r}: forbidden labels {sorted(bad)} or missing memcluster_ prefix")


def _m(name: str, kind: Kind, description: str, *labels: str, buckets: tuple[float, ...] = MS_BUCKETS) -> Metric:
    return Metric(f"memcluster_{name}", kind, description, labels, buckets)


METRICS: dict[str, Metric] = {m.name: m for m in (
    # HTTP (serve_apps.observability)
    _m("http_requests_total", "counter", "HTTP requests by route template and status class.",
       "app", "route", "method", "status_class"),
    _m("http_request_duration_ms", "histogram", "HTTP request latency by route template (ms).",
       "app", "route", "method"),
    # search (the parts of the Server-Timing header)
    _m("search_part_duration_ms", "histogram", "Search latency by part: embed, shard, encode, app (ms).",
       "app", "part"),
    _m("search_hits", "histogram", "Hits returned per search.", "app", buckets=COUNT_BUCKETS),
    _m("search_tokens", "histogram", "Whitespace tokens of the hits returned per search.", "app",
       buckets=(10, 50, 100, 250, 500, 1000, 2000, 5000, 10000)),
    # writes (the shard)
    _m("writes_total", "counter", "Writes through the shard by op (add, update, delete, clear, restore, forget: "
       "an erasure) and source (api: an API call; extraction: an applied extracted operation).",
       "app", "shard", "op", "source"),
    _m("write_duration_ms", "histogram", "Write latency inside the shard, store flush included (ms).",
       "app", "shard", "op"),
    _m("vector_flush_ms", "histogram", "Vector-store flush latency (ms): the embedded Qdrant Edge shard's flush "
       "after each write batch and optimize. A Qdrant server applies each write with wait=True and has no "
       "separate flush, so the server backend records none.", "shard", "engine"),
    _m("vector_tier_build_ms", "histogram", "Build of a large user's dedicated vector store with its HNSW "
       "index, off the shard's process (memcore.stores.edge_tiers): export, build and switch (ms).", "shard",
       buckets=(100, 500, 1000, 5000, 10000, 30000, 60000, 300000, 900000, 3600000)),
    _m("keyword_commit_ms", "histogram", "Keyword-index (Tantivy) commit and searcher reload latency (ms): per "
       "write, or per background commit when commits are deferred.", "shard"),
    # extraction (actors.extraction_queue)
    _m("jobs_total", "counter", "Extraction jobs by status (queued, running, done, partial, failed, skipped) "
       "and reason class.", "app", "shard", "status", "reason"),
    _m("operations_failed_total", "counter", "Extracted operations that failed to apply, by proposed op (add, "
       "update, delete, clear); their job is partial (its other operations applied).", "app", "shard", "op"),
    _m("job_duration_ms", "histogram", "Extraction job duration, start to finish (ms).", "app", "shard", "status"),
    _m("extractor_call_duration_ms", "histogram", "Extractor (model) call latency (ms).", "app", "shard"),
    _m("extractor_errors_total", "counter", "Extractor call errors by kind: timeout, bad_tool_call, http, other.",
       "app", "shard", "kind"),
    _m("queue_depth", "gauge", "Extraction jobs waiting in the shard's queue.", "shard"),
    _m("jobs_running", "gauge", "Extraction jobs running in the shard.", "shard"),
    _m("cursor_lag_seconds", "gauge", "Now minus the oldest unextracted turn's time in the shard (0: none).",
       "shard"),
    # shards
    _m("shard_entries", "gauge", "Active entries owned by the shard.", "shard"),
    _m("shard_keyword_docs", "gauge", "Documents in the shard's keyword index.", "shard"),
    _m("shard_starts_total", "counter", "Shard actor starts (a restart is any start after the first).", "shard"),
    _m("keyword_rebuilds_total", "counter", "Keyword-index rebuilds at shard start.", "shard"),
    _m("keyword_rebuild_duration_ms", "histogram", "Keyword-index rebuild duration (ms).", "shard"),
    # Ray Data jobs (jobs/)
    _m("data_rows_total", "counter", "Rows through a Ray Data job (jobs/: backfill, reextract) by stage (read, "
       "extracted, embedded, written, failed) and the job's own counter name; throughput is its rate().",
       "job", "stage", "counter"),
    _m("data_job_duration_ms", "histogram", "Ray Data job wall time by job and status (ok, failed) (ms).",
       "job", "status", buckets=(100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000)),
    _m("data_rows_per_second", "gauge", "Rows per second of the last finished Ray Data job by job, stage and "
       "counter (the counter's rows over the job's wall time).", "job", "stage", "counter"),
)}


class Recorder(Protocol):
    def count(self, name: str, value: float = 1.0, **labels: str) -> None: ...

    def observe(self, name: str, value: float, **labels: str) -> None: ...

    def gauge(self, name: str, value: float, **labels: str) -> None: ...


class NullRecorder:
    """The default: records nothing."""

    enabled = False

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        return None

    def observe(self, name: str, value: float, **labels: str) -> None:
        return None

    def gauge(self, name: str, value: float, **labels: str) -> None:
        return None


class _State:
    recorder: Recorder = NullRecorder()


def set_recorder(recorder: Recorder | None) -> None:
    """Install ``recorder`` for this process (None: back to recording nothing)."""
    _State.recorder = recorder if recorder is not None else NullRecorder()


def recorder() -> Recorder:
    return _State.recorder


def defer(fn: Callable[[], None]) -> None:
    """Run ``fn`` where the recorder records (its background thread), or now when it has none."""
    submit = getattr(_State.recorder, "submit", None)
    if submit is not None:
        submit(fn)
    else:
        fn()


def count(name: str, value: float = 1.0, **labels: str) -> None:
    _State.recorder.count(name, value, **labels)


def observe(name: str, value: float, **labels: str) -> None:
    _State.recorder.observe(name, value, **labels)


def gauge(name: str, value: float, **labels: str) -> None:
    _State.recorder.gauge(name, value, **labels)


@contextmanager
def timed(name: str, **labels: str) -> Iterator[None]:
    """Observe the block's duration in ms as histogram ``name`` (recorded even when the block raises)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _State.recorder.observe(name, (time.perf_counter() - t0) * 1e3, **labels)


def status_class(status: int) -> str:
    return f"{status // 100}xx"


def reason_label(code: str | None) -> str:
    """A job's reason code (:data:`memcore.records.JobReason`, set where the reason is produced) as a label."""
    return code or "none"


def error_kind(exc: BaseException) -> str:
    """An extractor error as ``timeout``, ``http``, ``bad_tool_call`` or ``other`` (by type and message)."""
    name, text = type(exc).__name__.lower(), str(exc).lower()
    if "timeout" in name or "timed out" in text:
        return "timeout"
    if "http" in text or "connect" in text or "apistatus" in name or "apiconnection" in name:
        return "http"
    if any(w in text for w in ("tool", "json", "argument", "unreadable", "no choices", "without a message")):
        return "bad_tool_call"
    return "other"


def data_stage(counter: str) -> str | None:
    """The stage of a Ray Data job counter (``turns_read`` → read, ``failed_rows`` → failed), or None."""
    if counter.startswith("failed") or counter.endswith("_failed"):
        return "failed"
    if counter.endswith("_read") or counter == "sessions":
        return "read"
    if counter.endswith("_written") or counter == "entries_new":
        return "written"
    if counter == "embedded":
        return "embedded"
    if counter == "events" or "extract" in counter:
        return "extracted"
    return None


def count_data_rows(counts: dict[str, int], *, job: str) -> None:
    """Count a Ray Data job's reported rows by stage (counters without a stage are not exported)."""
    for counter, n in counts.items():
        stage = data_stage(counter)
        if stage is not None and n:
            _State.recorder.count("memcluster_data_rows_total", float(n), job=job, stage=stage, counter=counter)


def data_job_finished(job: str, status: str, wall_s: float, counts: dict[str, int]) -> None:
    """A Ray Data job ended: its wall time, and each staged counter's rows over that time (rows/s)."""
    _State.recorder.observe("memcluster_data_job_duration_ms", wall_s * 1e3, job=job, status=status)
    for counter, n in counts.items():
        stage = data_stage(counter)
        if stage is not None:
            _State.recorder.gauge("memcluster_data_rows_per_second", n / max(wall_s, 1e-9), job=job, stage=stage,
                                  counter=counter)


# ---------------------------------------------------------------- structured logs
EVENTS = logging.getLogger("memcluster.events")
"""One JSON line per request (``event: request``) and per job (``event: job``) at INFO."""
_TEXT_FIELDS = frozenset({"text", "memory", "query", "messages", "content", "detail", "errors"})
"""Fields that may hold memory text or user messages: logged only at DEBUG."""
LOG_LEVEL_VAR = "MEMCLUSTER_EVENT_LOG"
"""``INFO`` (default): the lines without text; ``DEBUG``: with text fields; ``OFF``: none."""


def setup_event_log(level: str | None = None) -> None:
    """Send the event lines to stderr as bare JSON (once per process; Ray collects worker stderr)."""
    import os
    import sys

    name = (level or os.environ.get(LOG_LEVEL_VAR, "INFO")).upper()
    EVENTS.setLevel(logging.CRITICAL + 1 if name == "OFF" else getattr(logging, name, logging.INFO))
    if not any(getattr(h, "memcluster_events", False) for h in EVENTS.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.memcluster_events = True  # type: ignore[attr-defined]
        EVENTS.addHandler(handler)
        EVENTS.propagate = False


def log_event(event: str, **fields: Any) -> None:
    """One JSON line on ``memcluster.events``; text fields are dropped unless the logger is at DEBUG."""
    if not EVENTS.isEnabledFor(logging.INFO):
        return
    debug = EVENTS.isEnabledFor(logging.DEBUG)
    record = {"ts": round(time.time(), 3), "event": event,
              **{k: v for k, v in fields.items() if v is not None and (debug or k not in _TEXT_FIELDS)}}
    EVENTS.info(json.dumps(record, default=str, separators=(",", ":")))
