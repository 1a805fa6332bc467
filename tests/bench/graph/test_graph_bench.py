"""The knowledge-graph bench (:mod:`bench.graph.run`) on a small graph: every figure present, and the bulk
preload leaves the graph the size the timed adds alone would have."""

from __future__ import annotations

from bench.graph.run import run


def test_bulk_preload_then_timed_adds_and_queries() -> None:
    result = run(facts=400, users=4, queries=20, preload=40)
    assert result["bulk_loaded"]["facts"] == 360 and result["add"]["timed"] == 40
    assert 390 <= result["facts_stored"] <= 400  # a repeated random triple is one fact
    for op in ("add", "supersede", "query", "query_as_of", "timeline"):
        assert result[op]["p50"] > 0 and result[op]["p99"] >= result[op]["p50"], op
    assert set(result["neighbourhood_by_hops"]) == {"1", "2", "3"}
    hood = result["neighbourhood_by_hops"]
    assert 0 < hood["1"]["entities_mean"] <= hood["3"]["entities_mean"] <= 100


def test_without_preload_every_add_is_timed() -> None:
    result = run(facts=60, users=3, queries=10)
    assert result["bulk_loaded"] is None and result["add"]["timed"] == 60 and result["add"]["n"] == 60
