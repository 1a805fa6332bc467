from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memcore import fusion
from memcore.model import Entry, Kind
from memcore.search_model import SearchHit

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


def test_weighted_rrf() -> None:
    scores = dict(fusion.rrf([["a", "b"], ["b", "c"]], k=10, weights=[1.0, 2.0]))
    assert abs(scores["a"] - 1 / 11) < 1e-12
    assert abs(scores["b"] - (1 / 12 + 2 / 11)) < 1e-12
    assert abs(scores["c"] - 2 / 12) < 1e-12
    assert fusion.rrf([["a"], ["b"]], weights=[1.0, 1.0]) == fusion.rrf([["a"], ["b"]])  # weights 1 = plain RRF
    with pytest.raises(ValueError, match="one weight per ranking"):
        fusion.rrf([["a"], ["b"]], weights=[1.0])


def window(i: str, turns: list[int], score: float, *, names: str = "AB") -> SearchHit:
    """A verbatim window over turns t<n> of one session: one line per turn, event time = its first turn."""
    lines = [f"{names[n % 2]}: line {n}" for n in turns]
    e = Entry(id=i, app="a", user="u", text="\n".join(lines), kind=Kind.EPISODE, provenance=[f"t{n}" for n in turns],
              event_time=NOW.replace(minute=turns[0]), created_at=NOW, updated_at=NOW)
    return SearchHit(entry=e, score=score)


def test_merge_overlapping_windows() -> None:
    hits = [window("w5", [4, 5, 6], 0.9), window("w9", [8, 9, 10], 0.8), window("w4", [3, 4, 5], 0.7),
            window("w7", [6, 7, 8], 0.6), window("w20", [19, 20, 21], 0.5)]
    out = fusion.merge_overlapping(hits, limit=10)
    assert [h.entry.id for h in out] == ["w5", "w9", "w20"]  # best entry's id and score, in score order
    first = out[0]
    assert first.score == 0.9 and first.merged == ["w4", "w7"]
    assert first.entry.provenance == ["t3", "t4", "t5", "t6", "t7", "t8"]  # ordered by the windows' event times
    assert first.entry.text.split("\n") == [f"{'AB'[n % 2]}: line {n}" for n in range(3, 9)]
    assert first.entry.event_time == NOW.replace(minute=3)
    assert out[1].merged == [] and out[1] == hits[1]  # nothing merged: the hit as it was
    assert [h.entry.id for h in fusion.merge_overlapping(hits, limit=2)] == ["w5", "w9"]
    assert len(fusion.merge_overlapping(hits, limit=10, scan=2)) == 2  # only the best 2 hits examined


def test_merge_leaves_other_entries_alone() -> None:
    fact = hit("f", "User: line 5", 0.95)  # a fact, even one that looks like a line of the window
    other_line = window("x", [5], 0.85, names="CD")  # shares turn t5 but with a different line
    two_lines_one_turn = SearchHit(entry=fact.entry.model_copy(update={"id": "p", "kind": Kind.EPISODE,
                                                                        "text": "a\nb", "provenance": ["t5"]}),
                                   score=0.8)
    hits = [window("w5", [4, 5, 6], 0.9), fact, other_line, two_lines_one_turn]
    out = fusion.merge_overlapping(hits, limit=10)
    assert [h.entry.id for h in out] == ["w5", "f", "x", "p"] and all(not h.merged for h in out)


def test_merge_respects_the_text_limit() -> None:
    from memcore.fields import MAX_TEXT_BYTES

    big = "x" * (MAX_TEXT_BYTES // 2)
    a = window("a", [1, 2], 0.9)
    a = SearchHit(entry=a.entry.model_copy(update={"text": f"A: {big}\nB: y"}), score=0.9)
    b = window("b", [2, 3], 0.8)
    b = SearchHit(entry=b.entry.model_copy(update={"text": f"B: y\nA: {big}"}), score=0.8)
    assert [h.entry.id for h in fusion.merge_overlapping([a, b], limit=10)] == ["a", "b"]
