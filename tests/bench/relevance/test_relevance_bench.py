"""The relevance benchmark's scoring (bench.relevance.run) on known values: the AUC and its interval, the
top hit's signals."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from bench.relevance.run import auc, auc_ci, gate_of, keyword_evidence, top_values
from memcore import relevance
from memcore.model import Entry
from memcore.search_model import SearchHit

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def test_auc_counts_pairs_and_ties_half() -> None:
    assert auc(np.asarray([0.9, 0.8]), np.asarray([0.1, 0.2])) == 1.0
    assert auc(np.asarray([0.1, 0.2]), np.asarray([0.9, 0.8])) == 0.0
    assert auc(np.asarray([0.5, 0.9]), np.asarray([0.5, 0.1])) == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    lo, hi = auc_ci(np.asarray([0.9, 0.8, 0.3, 0.7]), np.asarray([0.1, 0.2, 0.4, 0.6]), n=200)
    assert 0.0 <= lo <= auc(np.asarray([0.9, 0.8, 0.3, 0.7]), np.asarray([0.1, 0.2, 0.4, 0.6])) <= hi <= 1.0


def test_top_values_of_a_hit_and_of_none() -> None:
    assert keyword_evidence("Where does Alice live?", "Alice lives in Lisbon; Alice live there") == pytest.approx(1.0)
    assert keyword_evidence("Where does Alice live?", "Bob plays chess") == 0.0
    entry = Entry(id="e1", app="a", user="u", text="Alice live in Lisbon", created_at=NOW, updated_at=NOW)
    got = top_values("Where does Alice live?", [SearchHit(entry=entry, score=0.1, relevance=0.6)])
    assert got == {"relevance": 0.6, "cosine": 0.6, "fused_score": 0.1, "keyword": 1.0}
    other = entry.model_copy(update={"text": "Bob lives in Lisbon"})  # lacks the query's one name: the full penalty
    got = top_values("Where does Alice live?", [SearchHit(entry=other, score=0.1, relevance=0.5)])
    assert got["relevance"] == 0.5 and got["cosine"] == pytest.approx(0.5 + relevance.NAME_PENALTY)
    assert top_values("q", [])["relevance"] == -1.0


def test_gate_empties_searches_whose_best_hit_is_below_the_floor() -> None:
    got = gate_of([1.0, 1.0, 0.0, 1.0], own_best=[0.9, 0.1, 0.5, 0.6], cross_best=[0.1, 0.9, 0.2, 0.33])
    at = got["0.35"]  # own: the second question's search is emptied (its any@5 lost); cross: 0.1, 0.2, 0.33 emptied
    assert at["cross_emptied"] == 0.75 and at["any@5"] == 0.5 and at["any@5_drop"] == 0.25
    assert got["0.25"]["cross_emptied"] == 0.5 and got["0.25"]["any@5_drop"] == 0.25
