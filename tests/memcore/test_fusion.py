from __future__ import annotations

from datetime import UTC, datetime

from memcore import fusion
from memcore.model import Entry, Kind, SearchHit

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def hit(i: str, text: str, score: float, kind: Kind = Kind.FACT, et: datetime | None = None) -> SearchHit:
    e = Entry(id=i, app="a", user="u", text=text, kind=kind, event_time=et, created_at=NOW, updated_at=NOW)
    return SearchHit(entry=e, score=score)


def test_rrf_formula_and_tie_break() -> None:
    fused = fusion.rrf([["a", "b", "c"], ["c", "a"]], k=60)
    scores = dict(fused)
    assert abs(scores["a"] - (1 / 61 + 1 / 62)) < 1e-12
    assert abs(scores["c"] - (1 / 63 + 1 / 61)) < 1e-12
    assert abs(scores["b"] - 1 / 62) < 1e-12
    assert [i for i, _ in fused] == ["a", "c", "b"]
    # ties broken by id, and the function is pure
    assert fusion.rrf([["y"], ["x"]]) == [("x", 1 / 61), ("y", 1 / 61)]
    assert fusion.rrf([["y"], ["x"]]) == fusion.rrf([["y"], ["x"]])


def test_seed_example_first_and_third() -> None:
    scores = dict(fusion.rrf([["fuji", "hiking", "alice"], ["alice+fuji", "fuji"]]))
    assert abs(scores["fuji"] - (1 / 61 + 1 / 62)) < 1e-12


def test_dedup_keeps_higher_score_and_order() -> None:
    hits = [
        hit("1", "the user likes green tea in the morning", 0.5),
        hit("2", "the user likes green tea in the morning!", 0.9),
        hit("3", "completely different", 0.4),
    ]
    out = fusion.deduplicate(hits)
    assert [h.entry.id for h in out] == ["2", "3"]


def test_dedup_threshold_is_080() -> None:
    a = hit("a", "one two three four five", 1.0)
    b = hit("b", "one two three four six", 0.5)  # jaccard 4/6 < 0.8
    assert len(fusion.deduplicate([a, b])) == 2
    c = hit("c", "one two three four five six seven eight", 1.0)
    d = hit("d", "one two three four five six seven eight nine", 0.5)  # 8/9 >= 0.8
    assert [h.entry.id for h in fusion.deduplicate([c, d])] == ["c"]


def test_kind_fallback_requested_kind_first() -> None:
    primary = [hit("e1", "episode one", 0.2, Kind.EPISODE)]
    fallback = [hit("f1", "fact", 0.9), hit("e1", "episode one", 0.2, Kind.EPISODE),
                hit("e2", "ep2", 0.1, Kind.EPISODE)]
    out = fusion.merge_kind_fallback(primary, fallback, Kind.EPISODE)
    assert [h.entry.id for h in out] == ["e1", "e2", "f1"]


def test_order_by_event_time() -> None:
    hits = [
        hit("late", "x", 0.9, et=datetime(2024, 3, 1, tzinfo=UTC)),
        hit("none", "y", 0.8),
        hit("early", "z", 0.1, et=datetime(2023, 1, 1, tzinfo=UTC)),
    ]
    assert [h.entry.id for h in fusion.order_by_event_time(hits)] == ["early", "late", "none"]
