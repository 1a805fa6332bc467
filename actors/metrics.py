"""The ``ray.util.metrics`` recorder: every metric of :data:`memcore.telemetry.METRICS`, exported on
Ray's Prometheus endpoint (each node's metrics export port, which KubeRay and the Ray dashboard scrape;
Ray prefixes the names with ``ray_``, so they read ``ray_memcluster_*`` there).

:func:`install` is called once per Ray process that records (the shard actor, the Serve ingress):
it is idempotent and a no-op outside Ray or with ``MEMCLUSTER_METRICS=0`` (the benchmark's "off" arm).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from memcore import telemetry
from memcore.telemetry import METRICS, Metric

log = logging.getLogger(__name__)


class RayRecorder:
    """Applies each record on a background thread: a request pays one queue put per record, Ray's
    metric calls (tag checks, the OpenTelemetry recorder) run off the request path."""

    enabled = True

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._drain, name="memcluster-metrics", daemon=True).start()

    def _drain(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                fn()
            except Exception:
                log.exception("recording a metric failed")

    def _metric(self, name: str) -> Any:
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = self._make(METRICS[name])
        return made

    @staticmethod
    def _make(spec: Metric) -> Any:
        from ray.util import metrics

        if spec.kind == "counter":
            return metrics.Counter(spec.name, description=spec.description, tag_keys=spec.labels)
        if spec.kind == "histogram":
            return metrics.Histogram(spec.name, description=spec.description, boundaries=list(spec.buckets),
                                     tag_keys=spec.labels)
        return metrics.Gauge(spec.name, description=spec.description, tag_keys=spec.labels)

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the recording thread (work a record needs, such as parsing a response)."""
        self._queue.put(fn)

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        self._queue.put(lambda: self._metric(name).inc(value, tags=labels))

    def observe(self, name: str, value: float, **labels: str) -> None:
        self._queue.put(lambda: self._metric(name).observe(value, tags=labels))

    def gauge(self, name: str, value: float, **labels: str) -> None:
        self._queue.put(lambda: self._metric(name).set(value, tags=labels))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record submitted so far is applied (tests)."""
        done = threading.Event()
        self._queue.put(done.set)
        return done.wait(timeout)


def enabled() -> bool:
    return os.environ.get("MEMCLUSTER_METRICS", "1").lower() not in {"0", "false", "off", "no"}


def install() -> bool:
    """Record through Ray in this process (when Ray is initialised and metrics are not turned off)."""
    import ray

    if ray.is_initialized():
        telemetry.setup_event_log()
    if not enabled() or not ray.is_initialized():
        return False
    if not isinstance(telemetry.recorder(), RayRecorder):
        telemetry.set_recorder(RayRecorder())
    return True
