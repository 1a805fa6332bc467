"""Result shaping of the retrieval benchmark (bench/retrieval/shape.py) and its scores: the same whether a hit's
provenance names bare event ids ("D1:2") or "<session>/<event id>" ("session_1/D1:2")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.harness.locomo import convert
from bench.retrieval.recall import score
from bench.retrieval.shape import Archive, Post, shape
from memcore.model import Entry
from memcore.search_model import SearchHit

SAMPLE = {
    "sample_id": "conv-y",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "9:00 am on 1 June, 2023",
        "session_1": [{"speaker": s, "dia_id": f"D1:{i}", "text": f"turn {i} of one"}
                      for i, s in enumerate(["Ann", "Bob", "Ann", "Bob", "Ann"], 1)],
        "session_2_date_time": "9:00 am on 8 June, 2023",
        "session_2": [{"speaker": s, "dia_id": f"D2:{i}", "text": f"turn {i} of two"}
                      for i, s in enumerate(["Ann", "Bob", "Ann"], 1)],
    },
    "qa": [],
}
NOW = datetime(2024, 1, 1, tzinfo=UTC)
HITS = [["D2:2"], ["D1:2", "D1:3"], ["D1:3", "D1:4"], ["D2:1"]]  # windows, best first


def hits(session_refs: bool) -> list[SearchHit]:
    def ref(turn: str) -> str:
        return f"session_{turn[1]}/{turn}" if session_refs else turn

    return [SearchHit(entry=Entry(id=f"e{i}", app="locomo", user="conv-y", created_at=NOW, updated_at=NOW,
                                  text=" ".join(prov), provenance=[ref(t) for t in prov]), score=1.0 / (i + 1))
            for i, prov in enumerate(HITS)]


@pytest.mark.parametrize("post", [Post(), Post(shape="spans", before=1, after=0), Post(shape="sessions")],
                         ids=["hits", "spans", "sessions"])
def test_shaping_and_scores_do_not_depend_on_how_provenance_names_a_turn(post: Post) -> None:
    conv = convert(SAMPLE)
    archive = Archive([conv])
    bare = shape(hits(False), post, conv.user, archive)
    scoped = shape(hits(True), post, conv.user, archive)
    assert bare == scoped and bare
    assert all(not t.startswith("session_") for r in scoped for t in r.provenance)
    evidence = ["D1:3", "D2:1"]
    assert score([r.provenance for r in scoped], [r.text for r in scoped], evidence) == score(
        [r.provenance for r in bare], [r.text for r in bare], evidence)


def test_spans_merge_neighbouring_hits_of_a_session() -> None:
    conv = convert(SAMPLE)
    results = shape(hits(True), Post(shape="spans", before=1, after=0), conv.user, Archive([conv]))
    # D2:2 (+ D2:1 before); D1:2-3 and D1:3-4 (+ D1:1 before) merged into one span; D2:1 joins the first
    assert [r.provenance for r in results] == [("D2:1", "D2:2"), ("D1:1", "D1:2", "D1:3", "D1:4")]
    assert results[0].text == "Ann: turn 1 of two\nBob: turn 2 of two"
