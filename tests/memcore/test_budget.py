"""Token budgets (memcore.budget): search and preload never exceed ``max_tokens``, a cut hit carries exactly
its returned turns' provenance, a budget below the preload frame is refused naming ``max_tokens``.
Property tests over random hits and budgets (both counters), then a real MemoryService (Qdrant Edge +
Tantivy) with merged verbatim windows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore import budget, preload
from memcore.errors import ValidationError
from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.fusion import turn_lines
from memcore.model import Entry, Kind, UserKey
from memcore.search_model import SearchHit, SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")
T0 = datetime(2023, 7, 1, 9, 0, tzinfo=UTC)
WORDS = ["puppy", "Biscuit", "shoes", "laptop", "travel", "Lisbon", "tea", "the", "a", "moved", "名字", "é"]
COUNTERS = [budget.counter("whitespace"), budget.counter("tokenizer")]

lines_st = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join), min_size=1, max_size=6)


@st.composite
def hits_st(draw: st.DrawFn) -> list[SearchHit]:
    out: list[SearchHit] = []
    for i in range(draw(st.integers(0, 8))):
        lines = draw(lines_st)
        episode = draw(st.booleans())
        entry = Entry(id=f"e{i}", app="app", user="alice", created_at=T0, updated_at=T0, text="\n".join(lines),
                      kind=Kind.EPISODE if episode else Kind.FACT,
                      provenance=[f"e{i}t{j}" for j in range(len(lines))] if episode else [])
        out.append(SearchHit(entry=entry, score=1.0 / (i + 1)))
    return out


def assert_cut_is_exact(original: Entry, got: SearchHit) -> None:
    pairs = turn_lines(original)
    assert pairs is not None
    kept = dict(pairs)
    assert got.entry.provenance and not set(got.entry.provenance) & set(got.cut)
    assert sorted(got.entry.provenance + got.cut) == sorted(original.provenance)
    assert got.entry.text.split("\n") == [kept[t] for t in got.entry.provenance]  # exactly the returned turns
    order = [t for t, _ in pairs]
    assert [order.index(t) for t in got.entry.provenance] == sorted(order.index(t) for t in got.entry.provenance)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hits=hits_st(), max_tokens=st.integers(1, 120), query=st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join),
       which=st.sampled_from([0, 1]))
def test_fit_hits_never_exceeds_the_budget_and_cuts_exactly(hits: list[SearchHit], max_tokens: int, query: str,
                                                            which: int) -> None:
    count = COUNTERS[which]
    got = budget.fit_hits(hits, max_tokens, query, count)
    assert sum(count(h.entry.text) for h in got) <= max_tokens
    if sum(count(h.entry.text) for h in hits) <= max_tokens:
        assert got == hits  # everything fits: nothing is touched
    ids = [h.entry.id for h in hits]
    assert [ids.index(h.entry.id) for h in got] == sorted({ids.index(h.entry.id) for h in got})  # rank order
    by_id = {h.entry.id: h for h in hits}
    for h in got:
        if h.cut:
            assert_cut_is_exact(by_id[h.entry.id].entry, h)
        else:
            assert h.entry == by_id[h.entry.id].entry
    if which == 0:  # whitespace counts add up line by line: whatever was left out did not fit any more
        left = max_tokens - sum(count(h.entry.text) for h in got)
        returned = {h.entry.id: h for h in got}
        for h in hits:
            pairs = turn_lines(h.entry)
            kept = returned.get(h.entry.id)
            if pairs is None:
                assert kept is not None or count(h.entry.text) > left
            else:
                have = set(kept.entry.provenance) if kept is not None else set()
                assert all(count(text) > left for turn, text in pairs if turn not in have)


def test_fit_hits_spends_the_budget_on_the_turns_good_windows_share() -> None:
    """Three ranked windows of one conversation, merged into one hit: under a budget of one turn, the
    turn all three windows hold is the one returned (not the first line), its provenance exactly it."""
    lines = {f"t{i}": f"line number {i} of the talk" for i in range(5)}

    def window(i: int, turns: list[str]) -> SearchHit:
        entry = Entry(id=f"w{i}", app="app", user="alice", created_at=T0, updated_at=T0, kind=Kind.EPISODE,
                      text="\n".join(lines[t] for t in turns), provenance=turns)
        return SearchHit(entry=entry, score=1.0 / (i + 1))

    windows = [window(0, ["t1", "t2", "t3"]), window(1, ["t2", "t3", "t4"]), window(2, ["t0", "t1", "t2"])]
    merged = window(0, ["t0", "t1", "t2", "t3", "t4"])
    got = budget.fit_hits([merged], 6, "the talk", budget.whitespace_count, windows=windows)
    assert len(got) == 1 and got[0].entry.provenance == ["t2"] and got[0].entry.text == lines["t2"]
    assert got[0].cut == ["t0", "t1", "t3", "t4"]
    got = budget.fit_hits([merged], 12, "the talk", budget.whitespace_count, windows=windows)
    assert got[0].entry.provenance == ["t2", "t3"]  # t3 is held by windows 0 and 1, t1 by 0 and 2 (ranked lower)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hits=hits_st(), extra=st.integers(0, 150), playbook=st.sampled_from([None, "Use these notes."]),
       which=st.sampled_from([0, 1]))
def test_preload_fit_renders_within_the_budget(hits: list[SearchHit], extra: int, playbook: str | None,
                                               which: int) -> None:
    count = COUNTERS[which]
    max_tokens = preload.min_tokens(playbook, count) + extra
    entries, cut = preload.fit([h.entry for h in hits], max_tokens, "puppy shoes", playbook, count)
    assert count(preload.render(entries, playbook)) <= max_tokens
    assert [e.id for e in entries] == [h.entry.id for h in hits[: len(entries)]]
    by_id = {h.entry.id: h.entry for h in hits}
    for e in entries:
        if e.id in cut:
            assert_cut_is_exact(by_id[e.id], SearchHit(entry=e, score=0.0, cut=cut[e.id]))
        else:
            assert e == by_id[e.id]


@pytest.mark.parametrize("playbook", [None, "Short playbook."])
def test_preload_below_the_frame_is_refused_naming_max_tokens(playbook: str | None) -> None:
    floor = preload.min_tokens(playbook)
    with pytest.raises(ValidationError) as exc:
        preload.fit([], floor - 1, "", playbook)
    assert exc.value.field == "max_tokens"
    assert preload.fit([], floor, "", playbook) == ([], {})


def test_options_refuse_a_budget_below_one() -> None:
    with pytest.raises(Exception, match="max_tokens"):
        SearchOptions(query="x", max_tokens=0)


def test_the_tokenizer_counts_wordpieces() -> None:
    tok = budget.counter("tokenizer")
    assert tok("") == 0 and tok("puppy") == 1 and tok("Biscuit chews shoes") > budget.whitespace_count("Biscuit")
    with pytest.raises(ValueError, match="token counter"):
        budget.counter("chars")  # type: ignore[arg-type]


# ------------------------------------------------------------------ through the service
def _conversation(service: MemoryService) -> None:
    texts = ["I adopted a beagle puppy", "What is the puppy called?", "His name is Biscuit",
             "Biscuit is a lovely name", "He chews my shoes", "Puppies love shoes",
             "Unrelated: I bought a new laptop", "Which one?", "A small one for travel"]
    events = [Event(id=f"t{i}", role="user" if i % 2 == 0 else "assistant", timestamp=T0 + timedelta(minutes=i),
                    content=text) for i, text in enumerate(texts)]
    mems = [op.memory for op in VerbatimExtractor("window", window=1).extract(events).operations if op.memory]
    service.add_many(A, mems)


def test_search_with_max_tokens_cuts_a_merged_window_to_its_matching_turns(
        make_service: Callable[..., MemoryService]) -> None:
    service = make_service("edge")
    _conversation(service)
    query = "beagle puppy Biscuit chews"
    whole = service.search(A, {"query": query})
    assert whole[0].merged and len(whole[0].entry.provenance) >= 4
    for max_tokens in (3, 8, 12, 20, 40, 400):
        got = service.search(A, {"query": query, "max_tokens": max_tokens})
        assert sum(budget.whitespace_count(h.entry.text) for h in got) <= max_tokens
        ids = [h.entry.id for h in whole]
        assert [ids.index(h.entry.id) for h in got] == sorted(ids.index(h.entry.id) for h in got)
        for h in got:
            if h.cut:
                assert_cut_is_exact(whole[ids.index(h.entry.id)].entry, h)
    got = service.search(A, {"query": query, "max_tokens": 12})
    assert got and all(h.cut for h in got)  # cut to the turns that carry the match
    assert "beagle" in got[0].entry.text or "Biscuit" in got[0].entry.text
    assert service.search(A, {"query": query, "max_tokens": 400}) == whole


def test_preload_with_max_tokens_keeps_the_block_within_the_budget(
        make_service: Callable[..., MemoryService]) -> None:
    service = make_service("edge")
    _conversation(service)
    for max_tokens in (preload.min_tokens(None), 70, 90, 200):
        result = preload.preload(service, A, 3, "Tell me about the beagle puppy", max_tokens=max_tokens)
        assert budget.whitespace_count(result.text) <= max_tokens
        assert result.strategy == "search"
        for e in result.entries:
            if e.id in result.cut:
                pairs = turn_lines(e)
                assert pairs is not None and len(pairs) == len(e.provenance)
    with pytest.raises(ValidationError) as exc:
        preload.preload(service, A, 3, "puppy", max_tokens=preload.min_tokens(None) - 1)
    assert exc.value.field == "max_tokens"


def test_a_service_configured_with_the_tokenizer_counts_wordpieces(tmp_path, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    from memcore.settings import ServiceConfig
    from memcore.stores.qdrant_edge import QdrantEdgeStore
    from memcore.stores.tantivy_index import TantivyIndex

    service = MemoryService(QdrantEdgeStore(tmp_path / "vectors", hashing_embedder.dim), TantivyIndex(tmp_path / "kw"),
                            hashing_embedder, ServiceConfig(token_counter="tokenizer"))
    try:
        _conversation(service)
        tok = budget.counter("tokenizer")
        assert service.token_count is tok
        for max_tokens in (5, 15, 40):
            got = service.search(A, {"query": "beagle puppy Biscuit chews", "max_tokens": max_tokens})
            assert got and sum(tok(h.entry.text) for h in got) <= max_tokens
            assert sum(budget.whitespace_count(h.entry.text) for h in got) < max_tokens  # wordpieces outnumber words
    finally:
        service.vectors.close()
        service.keywords.close()
