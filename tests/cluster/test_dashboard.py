"""The Grafana dashboard in k8s/grafana uses exactly the metrics of memcore.telemetry.METRICS (with Ray's
``ray_`` prefix and Prometheus' histogram suffixes), every one of them, and only labels they have."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memcore.telemetry import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "k8s" / "grafana" / "memcluster-dashboard.json"
SERIES = re.compile(r"ray_(memcluster_[a-z_]+?)(_bucket|_count|_sum)?(?=[{\[)\s,]|$)")


def test_dashboard_names_are_the_metric_table() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m.group(1) for e in exprs for m in SERIES.finditer(e)}
    assert used == set(METRICS), (used ^ set(METRICS))
    for e in exprs:
        for m in re.finditer(r"ray_(memcluster_[a-z_]+?)(?:_bucket|_count|_sum)?\{([^}]*)\}", e):
            labels = {kv.split("=")[0].strip().rstrip("=~!") for kv in m.group(2).split(",") if kv.strip()}
            assert labels <= set(METRICS[m.group(1)].labels) | {"le"}, (m.group(0), labels)
