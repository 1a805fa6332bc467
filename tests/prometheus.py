"""Reading Ray's Prometheus endpoint in tests: the ``memcluster_*`` series of the session's node (its
metrics export port), labels without Ray's own, values summed over the workers that report them."""

from __future__ import annotations

import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Series = dict[str, dict[tuple[tuple[str, str], ...], float]]
RAY_NOISE = {"Component", "NodeAddress", "SessionName", "Version", "WorkerId", "otel_scope_name",
             "otel_scope_schema_url", "otel_scope_version", "JobId", "le"}
"""Label keys Ray adds to every series (and a histogram's bucket bound): not ours, left out."""


def scrape(worker: str | None = None) -> Series:
    """``{sample name without ray_: {labels without Ray's own: value summed over workers}}``; with
    ``worker`` (a Ray worker id) only that process' series."""
    import ray

    port = ray._private.worker.global_worker.node.metrics_export_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: Series = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if worker is not None and s.labels.get("WorkerId") != worker:
                continue
            if s.name.startswith("ray_memcluster_"):
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in RAY_NOISE))
                out[s.name.removeprefix("ray_")][labels] += s.value
    return out


def total(series: Series, name: str, **want: str) -> float:
    """The sum of ``name`` over the label sets that include ``want``."""
    return sum(v for labels, v in series.get(name, {}).items() if set(want.items()) <= set(labels))


def wait_for(missing: Callable[[Series], list[str]], timeout_s: float = 90.0, worker: str | None = None) -> Series:
    """Scrape (``worker``: see :func:`scrape`) until ``missing(series)`` is empty (Ray exports each
    process' records every few seconds); fails with what is still missing after ``timeout_s``."""
    deadline, left = time.monotonic() + timeout_s, ["not scraped yet"]
    series: Series = {}
    while time.monotonic() < deadline:
        series = scrape(worker)
        left = missing(series)
        if not left:
            return series
        time.sleep(2)
    raise AssertionError(left)
