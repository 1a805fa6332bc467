"""The scorer behind the README's LoCoMo figures (bench/retrieval/recall.py), on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from bench.retrieval.recall import Scored, aggregate, mean_metrics, ndcg, ranked_sessions, score


def test_sessions_rank_by_first_appearance_and_ignore_malformed_ids() -> None:
    assert ranked_sessions([["D3:1", "D3:2"], ["D1:4", "bad", "D3:9"], ["d 2 : 7"]]) == [3, 1, 2]
    assert ranked_sessions([]) == []


def test_score_of_one_question() -> None:
    provenances = [["D2:1", "D2:2"], ["D5:3"], ["D2:4"], ["D1:1"]]
    texts = ["a b c", "d e", "f", "g h i j"]
    m = score(provenances, texts, ["D2:2", "D1:1"], ks=(1, 5))
    # sessions ranked 2, 5, 1: session 2 at @1; both sessions (2 and 1) within @5
    assert (m["session_recall_any@1"], m["session_recall_all@1"]) == (1.0, 0.0)
    assert (m["session_recall_any@5"], m["session_recall_all@5"]) == (1.0, 1.0)
    # turns: D2:2 in the first result, D1:1 only in the fourth
    assert (m["turn_recall_any@1"], m["turn_recall_all@1"]) == (1.0, 0.0)
    assert m["turn_recall_all@5"] == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert m["ndcg@10"] == pytest.approx((1 + 1 / math.log2(5)) / ideal)
    assert (m["tokens@10"], m["results"]) == (10.0, 4.0)


def test_ndcg_counts_each_evidence_turn_once_and_caps_at_one() -> None:
    assert ndcg([["D1:1"], ["D1:1"]], ["D1:1"]) == 1.0  # a second copy earns nothing
    assert ndcg([["D1:1", "D1:2"]], ["D1:1", "D1:2"]) == 1.0  # one result holding both: capped
    assert ndcg([["D9:9"]], []) == 0.0
    assert ndcg([["D9:9"], ["D1:1"]], ["D1:1"]) == pytest.approx(1 / math.log2(3))


def test_only_the_first_ten_results_count() -> None:
    provenances = [[f"D1:{i}"] for i in range(1, 13)]
    m = score(provenances, ["w"] * 12, ["D1:11"])
    assert m["turn_recall_any@10"] == 0.0 and m["ndcg@10"] == 0.0
    assert (m["tokens@10"], m["results"]) == (10.0, 10.0)


def test_aggregate_keeps_the_adversarial_category_out_of_overall() -> None:
    hit = score([["D1:1"]], ["x y"], ["D1:1"])
    miss = score([["D2:1"]], ["x y z"], ["D1:1"])
    scored = [Scored(1, hit), Scored(4, miss), Scored(5, hit)]
    result = aggregate(scored)
    overall = result["overall"]
    assert isinstance(overall, dict)
    assert overall["n"] == 2 and overall["session_recall_any@5"] == 0.5 and overall["tokens@10"] == 2.5
    assert result["adversarial"] == mean_metrics([hit])
    assert set(result["by_category"]) == {"1", "4", "5"}  # type: ignore[arg-type]
    assert mean_metrics([]) == {"n": 0}


def test_budget_score_counts_everything_that_fit() -> None:
    from bench.retrieval.recall import budget_score

    m = budget_score([["D2:1", "D2:2"], ["D5:3"], ["D1:1"]], ["a b", "c", "d e f"], ["D2:2", "D1:1"], 250)
    assert m == {"session_recall_any@250tok": 1.0, "turn_recall_all@250tok": 1.0, "tokens@250tok": 6.0}
    m = budget_score([["D5:3"]], ["c"], ["D2:2", "D1:1"], 500)
    assert m["session_recall_any@500tok"] == 0.0 and m["turn_recall_all@500tok"] == 0.0
    assert budget_score([], [], ["D2:2"], 1000)["tokens@1000tok"] == 0.0


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_questions() -> None:
    from bench.retrieval.recall import bootstrap_ci

    few = [{"x": float(i % 2)} for i in range(20)]
    many = [{"x": float(i % 2)} for i in range(2000)]
    (lo, hi), (lo2, hi2) = bootstrap_ci(few, ["x"])["x"], bootstrap_ci(many, ["x"])["x"]
    assert lo < 0.5 < hi and lo2 < 0.5 < hi2 and (hi2 - lo2) < (hi - lo) / 3
    assert bootstrap_ci([{"x": 1.0}] * 10, ["x"]) == {"x": [1.0, 1.0]}
    assert bootstrap_ci([], ["x"]) == {}
