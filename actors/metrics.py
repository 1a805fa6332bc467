"""The ``ray.util.metrics`` recorder: every metric of :data:`memcore.telemetry.METRICS`, exported on
Ray's Prometheus endpoint (each node's metrics export port, which KubeRay and the Ray dashboard scrape;
Ray prefixes the names with ``ray_``, so they read ``ray_memcluster_*`` there).

:func:`install` is called once per Ray process that records (the shard actor, the Serve ingress):
it is idempotent and a no-op outside Ray or with ``MEMCLUSTER_METRICS=0`` (the benchmark's "off" arm).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from memcore import telemetry
from memcore.telemetry import METRICS, Metric

_lock = threading.Lock()


class RayRecorder:
    enabled = True

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def _metric(self, name: str) -> Any:
        made = self._made.get(name)
        if made is None:
            with _lock:
                made = self._made.get(name) or self._make(METRICS[name])
                self._made[name] = made
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

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        self._metric(name).inc(value, tags=labels)

    def observe(self, name: str, value: float, **labels: str) -> None:
        self._metric(name).observe(value, tags=labels)

    def gauge(self, name: str, value: float, **labels: str) -> None:
        self._metric(name).set(value, tags=labels)


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
