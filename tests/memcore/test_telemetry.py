"""memcore.telemetry: the metric table's rules, the reason/error classes, the no-op default recorder,
and the JSON event line (text fields only at DEBUG)."""

from __future__ import annotations

import json
import logging

import pytest

from memcore import telemetry
from memcore.errors import ExtractorError


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
    assert telemetry.reason_class(None) == "none"
    assert telemetry.reason_class("a checker declined the extraction (2 pending messages)") == "checker"
    assert telemetry.reason_class("no new user/assistant text after the cursor") == "nothing_new"
    assert telemetry.reason_class("ExtractorError: the extraction model answered HTTP 500: x") == "extractor_error"
    assert telemetry.reason_class("the job timed out after 3 s (in the extractor)") == "timeout"
    assert telemetry.reason_class("something my user wrote") == "other"
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
