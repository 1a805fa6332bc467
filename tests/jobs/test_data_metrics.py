"""Ray Data job metrics on Prometheus: a tiny backfill (two good sessions, one row that is not JSON) on
the session Ray cluster, then Ray's Prometheus endpoint carries its rows per stage
(``memcluster_data_rows_total``: read, embedded, written, failed), its wall time
(``memcluster_data_job_duration_ms``) and rows per second (``memcluster_data_rows_per_second``),
recorded by the detached ``DataMetrics`` actor that outlives the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from jobs.backfill import BackfillOptions, Source, run_backfill
from jobs.common import DATA_METRICS_ACTOR
from tests.jobs.conftest import session_row, write_jsonl
from tests.prometheus import Series, total, wait_for

pytestmark = pytest.mark.ray

ROWS = [session_row("shop", "ann", "s1", [("user", "I adopted a beagle named Biscuit"),
                                          ("assistant", "Congratulations!")], day=1),
        session_row("shop", "bob", "b1", [("user", "My climbing gym is Boulder Barn")], day=2),
        "{not json"]
EXPECTED = {("read", "sessions"): 2.0, ("failed", "failed_rows"): 1.0, ("embedded", "embedded"): 3.0,
            ("written", "sessions_written"): 2.0, ("written", "turns_written"): 3.0}


def test_backfill_rows_by_stage_duration_and_throughput(make_cluster: Any, tmp_path: Path) -> None:
    cluster = make_cluster()
    path = write_jsonl(tmp_path / "archive.jsonl", ROWS)
    rows, jobs = "memcluster_data_rows_total", "memcluster_data_job_duration_ms_count"
    summary = run_backfill(cluster.settings, Source(paths=[str(path)]),
                           BackfillOptions(progress_s=0, granularity="turn"), log=print)
    assert (summary.sessions, summary.sessions_written, summary.turns, summary.failed_rows) == (2, 2, 3, 1)
    # the cluster's own namespace has its own DataMetrics actor: read that process' series only (other
    # tests' backfills report from theirs, some of them late)
    recorder = ray.get_actor(DATA_METRICS_ACTOR, namespace=cluster.settings.namespace)
    worker = ray.get(recorder.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_worker_id()))

    def missing(series: Series) -> list[str]:
        left = [f"{stage}/{counter}: {total(series, rows, job='backfill', stage=stage, counter=counter)} != {n}"
                for (stage, counter), n in EXPECTED.items()
                if total(series, rows, job="backfill", stage=stage, counter=counter) != n]
        if total(series, jobs, job="backfill", status="ok") != 1:
            left.append(f"{jobs}: {total(series, jobs, job='backfill', status='ok')} != 1")
        if not total(series, "memcluster_data_rows_per_second", job="backfill", counter="turns_written"):
            left.append("memcluster_data_rows_per_second{counter=turns_written}: none")
        return left

    series = wait_for(missing, timeout_s=60, worker=worker)
    rate = total(series, "memcluster_data_rows_per_second", job="backfill", counter="turns_written")
    assert 3 / rate == pytest.approx(summary.wall_s, rel=0.05)  # the last run's rows over its wall time
