"""What the Ray Data jobs share: the running cluster's shards (a :class:`actors.shard_client.SyncShardClient`),
a stats actor, progress lines.

A job runs in a driver already connected to the cluster (``ray.init(address=...)`` by memctl,
the session cluster in tests). It never creates shard actors: it writes through the ones the
cluster runs (named ``shard-<k>`` in the settings' namespace) and fails early when they are
missing, so entries never land in stores nobody serves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from actors import metrics
from actors.router import RayShardBackend
from actors.shard_client import SyncShardClient
from memcore import telemetry
from memcore.settings import Settings

MAX_FAILURE_SAMPLES = 100


def cluster_shards(settings: Settings) -> SyncShardClient:
    """The blocking shard client of a job: attached to the running shard actors (never creating one; a missing
    one is :class:`actors.router.ClusterNotRunning`), with the router's read retries and tracing."""
    return SyncShardClient(RayShardBackend(settings, create=False))


DATA_METRICS_ACTOR = "memcluster-data-metrics"
"""The detached actor that records the Ray Data jobs' metrics (one per namespace)."""


class DataMetrics:
    """Records every Ray Data job's ``memcluster_data_*`` series. A detached, long-lived actor (as Ray Data's
    own stats actor is): a job's stats actor and workers end with the job, often before Ray's next metrics
    report, and a counter that lives on is what Prometheus' ``rate()`` wants."""

    def __init__(self) -> None:
        metrics.install()

    def rows(self, job: str, counts: dict[str, int]) -> None:
        telemetry.count_data_rows(counts, job=job)

    def finished(self, job: str, status: str, wall_s: float, counts: dict[str, int]) -> None:
        telemetry.data_job_finished(job, status, wall_s, counts)

    def flush(self) -> bool:
        """Wait until every record so far is applied (Ray exports them at its next report)."""
        flush = getattr(telemetry.recorder(), "flush", None)
        return bool(flush()) if flush is not None else True


def data_metrics(namespace: str) -> Any:
    """The namespace's :class:`DataMetrics` actor (created on first use)."""
    import ray

    return ray.remote(num_cpus=0)(DataMetrics).options(  # type: ignore[attr-defined]
        name=DATA_METRICS_ACTOR, namespace=namespace, lifetime="detached", get_if_exists=True).remote()


class JobStats:
    """Counters and failure samples of one job run (a Ray actor; the stages report to it, and it forwards
    the counts to the :class:`DataMetrics` actor)."""

    def __init__(self, job: str, sink: Any, started: float | None = None) -> None:
        self.job, self.sink = job, sink
        self.counts: dict[str, int] = {}
        self.failures: list[dict[str, Any]] = []
        self.started = time.time() if started is None else started
        self.times: dict[str, list[float]] = {}
        """Seconds since the start at which each counter first and last grew (the job's phases)."""

    def add(self, counts: dict[str, int], failures: list[dict[str, Any]] | None = None) -> None:
        now = round(time.time() - self.started, 3)
        self.sink.rows.remote(self.job, dict(counts))
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + int(n)
            if n:
                self.times.setdefault(name, [now, now])[1] = now
        for f in failures or []:
            if len(self.failures) < MAX_FAILURE_SAMPLES:
                self.failures.append(f)

    def finish(self, status: str, wall_s: float) -> None:
        """The job ended (``ok`` or ``failed``) after ``wall_s``: its duration and rows per second by stage."""
        self.sink.finished.remote(self.job, status, wall_s, dict(self.counts))

    def snapshot(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "failures": list(self.failures), "times": dict(self.times),
                "elapsed_s": time.time() - self.started}


def stats_actor(job: str, namespace: str, started: float | None = None) -> Any:
    """A :class:`JobStats` actor of a ``job`` (backfill, reextract); ``started`` (``time.time()`` of the driver)
    anchors its phase times."""
    import ray

    return ray.remote(num_cpus=0)(JobStats).remote(job, data_metrics(namespace), started)


@contextmanager
def progress(stats: Any, render: Callable[[dict[str, Any]], str], log: Callable[[str], None],
             every_s: float) -> Iterator[None]:
    """Print ``render(stats snapshot)`` every ``every_s`` seconds while the block runs (0: never)."""
    import ray

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                log(render(ray.get(stats.snapshot.remote(), timeout=10)))
            except Exception:  # noqa: BLE001 - progress is best effort
                pass

    thread = threading.Thread(target=loop, name="job-progress", daemon=True)
    if every_s > 0:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(5)


def named(fn: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    """A plain function around a callable object (Ray Data names its stages after ``__name__``)."""

    def call(batch: Any) -> Any:
        return fn(batch)

    call.__name__ = call.__qualname__ = name
    return call
