"""Job records: the typed view of a job's operations and the one loop that waits for a job."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from memcore.records import FINISHED, UNFINISHED, JobRecord, OpResult, wait_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _job(status: str = "queued", **kw: object) -> JobRecord:
    return JobRecord.model_validate({"job_id": "0-" + "a" * 32, "status": status, "app": "a", "user": "u",
                                     "session": "s", "created_at": T0, **kw})


def test_results_parse_the_stored_operations_as_typed_results() -> None:
    stored = [OpResult(index=0, type="add", status="applied", action="add", effective_id="e1").model_dump(mode="json"),
              {"index": 1, "type": "update", "status": "skipped", "memory_id": "m2", "reason": "duplicate"}]
    job = _job("done", operations=stored)
    first, second = job.results
    assert (first.status, first.action, first.effective_id, first.memory_id) == ("applied", "add", "e1", None)
    assert (second.type, second.status, second.action, second.memory_id) == ("update", "skipped", None, "m2")
    assert job.operations == stored  # the record keeps the JSON it stores


def test_results_refuse_an_operation_that_is_not_one() -> None:
    with pytest.raises(ValidationError, match="status"):
        _ = _job("done", operations=[{"index": 0, "type": "add", "status": "maybe"}]).results


def test_unfinished_and_finished_split_the_statuses() -> None:
    assert not set(UNFINISHED) & set(FINISHED)
    assert [(_job(s).finished, s in UNFINISHED) for s in ("queued", "running", "done")] == [
        (False, True), (False, True), (True, False)]


def test_wait_job_polls_until_the_job_is_finished() -> None:
    states = iter(["running", "running", "done"])
    asked: list[str] = []

    async def fetch(job_id: str) -> JobRecord:
        asked.append(job_id)
        return _job(next(states))

    final = asyncio.run(wait_job(_job(), fetch, timeout_s=5.0, poll_s=0.001))
    assert final.status == "done" and asked == [final.job_id] * 3


def test_wait_job_gives_up_after_the_timeout_with_the_last_state() -> None:
    async def fetch(job_id: str) -> JobRecord:
        return _job("running")

    t0 = time.monotonic()
    final = asyncio.run(wait_job(_job(), fetch, timeout_s=0.05, poll_s=0.01))
    assert final.status == "running" and 0.05 <= time.monotonic() - t0 < 2.0


def test_wait_job_asks_nothing_for_a_finished_job() -> None:
    async def fetch(job_id: str) -> JobRecord:
        raise AssertionError("a finished job is not polled")

    assert asyncio.run(wait_job(_job("skipped"), fetch, timeout_s=5.0)).status == "skipped"
