"""memcore.telemetry: the metric table's rules, the reason/error classes, the no-op default recorder,
and the JSON event line (text fields only at DEBUG)."""

from __future__ import annotations

import json
import logging
from typing import get_args

import pytest

from memcore import telemetry
from memcore.errors import ExtractorError
from memcore.records import JobReason


def test_every_metric_is_prefixed_and_never_labelled_by_user() -> None:
    assert telemetry.METRICS
    for spec in telemetry.METRICS.values():
        assert spec.name.startswith("memcluster_")
        assert not telemetry.FORBIDDEN & set(spec.labels)
    with pytest.raises(ValueError, match="forbidden"):
        telemetry.Metric("memcluster_x", "counter", "x", ("app", "user"))
    with pytest.raises(ValueError, match="positive"):
        telemetry.Metric("memcluster_y", "histogram", "y", (), (0, 1))
    assert telemetry.MS_BUCKETS[0] == 1


def test_default_recorder_records_nothing() -> None:
    before = telemetry.recorder()  # a Ray test of the same run may have installed the Ray recorder
    try:
        telemetry.set_recorder(None)
        assert isinstance(telemetry.recorder(), telemetry.NullRecorder)
        telemetry.count("memcluster_writes_total", 1.0, app="a")  # no error, no effect
        ran: list[int] = []
        telemetry.defer(lambda: ran.append(1))  # no background thread: runs now
        assert ran == [1]
    finally:
        telemetry.set_recorder(before)


def test_reason_and_error_classes() -> None:
    assert telemetry.reason_label(None) == "none"
    assert [telemetry.reason_label(code) for code in get_args(JobReason)] == list(get_args(JobReason))
    assert telemetry.error_kind(ExtractorError("the extraction model timed out after 5 s")) == "timeout"
    assert telemetry.error_kind(ExtractorError("the extraction model answered HTTP 502: bad")) == "http"
    assert telemetry.error_kind(ExtractorError("the extraction model sent an unreadable answer: x")) == "bad_tool_call"
    assert telemetry.error_kind(RuntimeError("boom")) == "other"
    assert telemetry.status_class(503) == "5xx"


def test_event_line_is_json_and_keeps_text_for_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=telemetry.EVENTS.name):
        telemetry.log_event("job", job_id="0-ab", app="a", status="done", detail="I keep bees", counts={"adds": 1})
    line = json.loads(caplog.records[-1].getMessage())
    assert line["event"] == "job" and line["counts"] == {"adds": 1} and "detail" not in line
    assert "bees" not in caplog.text
    with caplog.at_level(logging.DEBUG, logger=telemetry.EVENTS.name):
        telemetry.log_event("job", job_id="0-ab", detail="I keep bees")
    assert json.loads(caplog.records[-1].getMessage())["detail"] == "I keep bees"


def test_ray_data_counters_map_to_stages() -> None:
    stages = {c: telemetry.data_stage(c) for c in
              ("turns_read", "sessions", "embedded", "sessions_written", "turns_written", "entries_new", "events",
               "failed_rows", "failed_sessions", "users_failed", "users_done", "skipped")}
    assert stages == {"turns_read": "read", "sessions": "read", "embedded": "embedded",
                      "sessions_written": "written", "turns_written": "written", "entries_new": "written",
                      "events": "extracted", "failed_rows": "failed", "failed_sessions": "failed",
                      "users_failed": "failed", "users_done": None, "skipped": None}


class _Recorded:
    """A recorder that keeps what it is given (the table's names only)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, float, dict[str, str]]] = []

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.records.append(("count", name, value, labels))

    def observe(self, name: str, value: float, **labels: str) -> None:
        self.records.append(("observe", name, value, labels))

    def gauge(self, name: str, value: float, **labels: str) -> None:
        self.records.append(("gauge", name, value, labels))


def test_flush_timing_and_a_finished_data_job(tmp_path: object) -> None:
    from pathlib import Path

    from memcore.fields import now_utc
    from memcore.model import Entry
    from memcore.stores.qdrant_edge import QdrantEdgeStore
    from memcore.stores.tantivy_index import TantivyIndex

    rec = _Recorded()
    telemetry.set_recorder(rec)
    try:
        telemetry.data_job_finished("backfill", "ok", 2.0, {"sessions": 4, "turns_written": 10, "users_done": 2})
        with QdrantEdgeStore(Path(str(tmp_path)) / "v", 4, shard=3) as store:
            now = now_utc()
            entry = Entry(id="e1", app="a", user="u", text="The user rows a boat.", created_at=now, updated_at=now)
            store.upsert([entry], [[1.0, 0.0, 0.0, 0.0]])
            index = TantivyIndex(Path(str(tmp_path)) / "k", shard=3)
            index.upsert([entry])
            index.close()
    finally:
        telemetry.set_recorder(None)
    assert all(name in telemetry.METRICS for _, name, _, _ in rec.records)
    gauges = {r[3]["counter"]: r[2] for r in rec.records if r[1] == "memcluster_data_rows_per_second"}
    assert gauges == {"sessions": 2.0, "turns_written": 5.0}  # users_done has no stage: not exported
    assert ("observe", "memcluster_data_job_duration_ms", 2000.0, {"job": "backfill", "status": "ok"}) in rec.records
    flushes = [r for r in rec.records if r[1] == "memcluster_vector_flush_ms"]
    commits = [r for r in rec.records if r[1] == "memcluster_keyword_commit_ms"]
    assert flushes and all(r[3] == {"shard": "3", "engine": "qdrant_edge"} and r[2] >= 0 for r in flushes)
    assert commits and all(r[3] == {"shard": "3"} for r in commits)
