from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memcore.model import Entry, Memory, Operation, UserKey
from memcore.policy.reconcile import (
    MAX_CANDIDATES,
    TIER_NONE,
    TIER_SKIP,
    TIER_UPDATE,
    candidate_options,
    reconcile,
    search_candidates,
    tier,
)
from memcore.search_model import SearchHit
from memcore.service import MemoryService

T0 = datetime(2025, 1, 1, tzinfo=UTC)
KEY = UserKey(app="app", user="u1")
NEW = "t1 t2 t3 t4 t5 t6 t7 t8 t9 t10"


def hit(text: str, score: float, n: int = 1) -> SearchHit:
    return SearchHit(entry=Entry(id=f"{n:064x}", app="app", user="u1", text=text, created_at=T0, updated_at=T0),
                     score=score)


def add(text: str = NEW) -> Operation:
    return Operation(type="add", memory=Memory(text=text))


def first(k: int) -> str:
    """The first ``k`` tokens of NEW: Jaccard with NEW is exactly k/10."""
    return " ".join(NEW.split()[:k])


@pytest.mark.parametrize(
    ("score", "jac", "expected"),
    [
        (0.90, 0.0, TIER_SKIP), (0.8999, 0.0, TIER_UPDATE), (0.0, 0.70, TIER_SKIP), (0.0, 0.6999, TIER_UPDATE),
        (0.60, 0.0, TIER_UPDATE), (0.5999, 0.0, TIER_NONE), (0.0, 0.40, TIER_UPDATE), (0.0, 0.3999, TIER_NONE),
        (0.95, 0.1, TIER_SKIP), (0.1, 0.95, TIER_SKIP), (0.65, 0.69, TIER_UPDATE), (0.0, 0.0, TIER_NONE),
    ],
)
def test_tiers_at_each_boundary(score: float, jac: float, expected: int) -> None:
    assert tier(score, jac) == expected


@pytest.mark.parametrize(
    ("candidate", "score", "action"),
    [
        (first(7), 0.0, "skip"),      # Jaccard 0.70
        (first(6), 0.0, "update"),    # Jaccard 0.60
        (first(4), 0.0, "update"),    # Jaccard 0.40
        (first(3), 0.0, "keep"),      # Jaccard 0.30
        ("unrelated words", 0.90, "skip"),
        ("unrelated words", 0.8999, "update"),
        ("unrelated words", 0.60, "update"),
        ("unrelated words", 0.5999, "keep"),
    ],
)
def test_reconcile_decisions_at_each_boundary(candidate: str, score: float, action: str) -> None:
    decision = reconcile(add(), [hit(candidate, score)])
    assert decision.action == action
    if action != "keep":
        assert decision.target is not None and decision.target.text == candidate


def test_tier_is_compared_before_score() -> None:
    related = hit("unrelated words", 0.89, n=1)  # update tier by a high score
    duplicate = hit(first(8), 0.30, n=2)  # skip tier by Jaccard 0.8
    decision = reconcile(add(), [related, duplicate])
    assert decision.action == "skip" and decision.target == duplicate.entry
    # within one tier the higher score wins
    a, b = hit("unrelated one", 0.62, n=3), hit("unrelated two", 0.75, n=4)
    assert reconcile(add(), [a, b]).target == b.entry


def test_at_most_three_candidates_are_considered() -> None:
    weak = [hit(f"other {i}", 0.1, n=i) for i in range(1, 4)]
    duplicate = hit(NEW, 1.0, n=9)
    assert MAX_CANDIDATES == 3
    assert reconcile(add(), [*weak, duplicate]).action == "keep"
    assert reconcile(add(), [duplicate, *weak]).action == "skip"


def test_update_disabled_keeps_the_add_but_still_skips_duplicates() -> None:
    assert reconcile(add(), [hit(first(5), 0.0)], update_enabled=False).action == "keep"
    assert reconcile(add(), [hit(first(9), 0.0)], update_enabled=False).action == "skip"


def test_only_adds_are_reconciled() -> None:
    upd = Operation(type="update", memory=Memory(text=NEW), memory_id="x")
    assert reconcile(upd, [hit(NEW, 1.0)]).action == "keep"
    assert reconcile(add(), []).action == "keep"


def test_candidates_are_searched_dense_only_with_cosine_scores(service: MemoryService) -> None:
    opts = candidate_options("anything")
    assert not opts.hybrid and opts.similarity_threshold == -1 and opts.max_results == 3
    for text in ("The project requires Go 1.21.", "The user likes green tea.", "The user lives in Lisbon.",
                 "Alice manages Bob.", "The newsletter is published every Wednesday."):
        service.add(KEY, {"text": text})
    hits = search_candidates(service, KEY, Memory(text="The project requires Go 1.21."))
    assert hits is not None and len(hits) == 3
    assert hits[0].entry.text == "The project requires Go 1.21." and hits[0].score == pytest.approx(1.0, abs=1e-3)
    assert all(-1.0 - 1e-5 <= h.score <= 1.0 + 1e-5 for h in hits)  # cosine, not RRF (about 0.016)
    assert hits[1].score > 0.1


def test_a_failed_candidate_search_returns_none(service: MemoryService) -> None:
    class Broken:
        dim = service.embedder.dim
        name = "broken"

        def embed_queries(self, texts: object) -> object:
            raise RuntimeError("embedder down")

        embed_passages = embed_queries

    service.embedder = Broken()  # type: ignore[assignment]
    assert search_candidates(service, KEY, Memory(text="anything")) is None
