"""``python -m bench locomo``: the default configuration through the backfill job on a one-conversation slice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import bench.__main__ as bench_cli
from bench.retrieval.configs import DEFAULT

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"
pytestmark = [pytest.mark.ray, pytest.mark.skipif(not DATA.exists(), reason="LoCoMo-10 is not in ../shared/data")]
HEADLINE = ("session_recall_any@5", "session_recall_all@5", "turn_recall_all@10", "ndcg@10")


def test_bench_locomo_writes_the_result_of_the_default_configuration(ray_session: Any, tmp_path: Path) -> None:
    data = tmp_path / "slice.json"
    data.write_text(json.dumps(json.loads(DATA.read_text())[:1]))  # the first conversation, whole
    out = tmp_path / "RESULT.json"
    assert bench_cli.main(["locomo", "--data", str(data), "--out", str(out)]) == 0

    result = json.loads(out.read_text())
    assert result["default"] == DEFAULT and result["config"]["name"] == DEFAULT
    assert result["configs"][DEFAULT]["ingest"]["via"] == "backfill"  # written by the backfill job
    assert result["configs"][DEFAULT]["ingest"]["backfill"]["turns"] == 419
    overall = result["overall"]
    for name in HEADLINE:
        assert 0.0 < overall[name] <= 1.0, (name, overall)
    assert overall["session_recall_any@5"] >= 0.8 and overall["turn_recall_all@10"] >= 0.5  # plausible
    assert overall["n"] > 100 and 0 < overall["tokens@10"] < 2000
    assert set(result["by_category"]) >= {"1", "2", "3", "4"}
    for cat, metrics in result["by_category"].items():
        assert metrics["n"] > 0 and all(0.0 <= metrics[k] <= 1.0 for k in HEADLINE), cat
    assert 0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert result["config"]["granularity"] == "window" and result["config"]["rrf_k"] is None  # engine defaults
    budget = result["budget"]  # recall within max_tokens, each figure with its bootstrap interval
    assert [b["max_tokens"] for b in budget["budgets"]] == [250, 500, 1000]
    for b in budget["budgets"]:
        assert 0 < b["tokens_used"] <= b["max_tokens"]
        for m in ("session_recall_any", "turn_recall_all"):
            lo, hi = b[m]["ci95"]
            assert 0.0 <= lo <= b[m]["value"] <= hi <= 1.0, (b, m)
    for k, v in budget["at_k"].items():
        if k != "tokens@10":
            assert v["ci95"][0] <= v["value"] <= v["ci95"][1], k
