"""The fusion knobs of a search (memcore.search) through a real MemoryService (Qdrant Edge + Tantivy)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from memcore import fusion
from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.model import UserKey
from memcore.search import Knobs
from memcore.search_model import SearchOptions
from memcore.service import MemoryService
from memcore.settings import ExtractorSettings, SearchDefaults, ServiceConfig, Settings

A = UserKey(app="app", user="alice")
T0 = datetime(2023, 7, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    return make_service("edge")


def test_options_left_none_take_the_service_defaults() -> None:
    defaults = SearchDefaults()
    knobs = Knobs.of(SearchOptions(query="q"), defaults)
    assert knobs == Knobs(rrf_k=10, dense_weight=1.0, keyword_weight=2.0, keyword_query="content", date_boost=True,
                          merge_overlapping=True)
    plain = SearchOptions(query="q", rrf_k=60, keyword_weight=1.0, keyword_query="raw", date_boost=False,
                          merge_overlapping=False)
    assert Knobs.of(plain, defaults) == Knobs(60, 1.0, 1.0, "raw", False, False)
    assert Knobs.of(SearchOptions(query="q"), SearchDefaults(rrf_k=60)).rrf_k == 60


def test_settings_reach_the_service_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCLUSTER_SERVICE__RRF_K", "60")
    monkeypatch.setenv("MEMCLUSTER_SERVICE__KEYWORD_WEIGHT", "1")
    monkeypatch.setenv("MEMCLUSTER_SERVICE__KEYWORD_QUERY", "raw")
    monkeypatch.setenv("MEMCLUSTER_SERVICE__DATE_BOOST", "false")
    monkeypatch.setenv("MEMCLUSTER_SERVICE__MERGE_OVERLAPPING", "false")
    monkeypatch.setenv("MEMCLUSTER_EXTRACTOR__BACKFILL_GRANULARITY", "turn")
    s = Settings()
    assert isinstance(s.service, ServiceConfig)
    assert (s.service.rrf_k, s.service.keyword_weight, s.service.keyword_query) == (60, 1.0, "raw")
    assert not s.service.date_boost and not s.service.merge_overlapping
    assert s.extractor.backfill_granularity == "turn" and s.extractor.granularity == "turn"
    assert ExtractorSettings().backfill_granularity == "window" and ExtractorSettings().granularity == "turn"


def test_plain_rrf_k60_is_the_seeds_formula(service: MemoryService) -> None:
    for text in ("green tea in the morning", "coffee at noon", "tea ceremony in Kyoto"):
        service.add(A, {"text": text})
    plain = service.search(A, {"query": "tea", "rrf_k": 60, "keyword_weight": 1, "keyword_query": "raw",
                               "date_boost": False})
    ranks_known = [h.score for h in plain]
    assert all(s <= 2 / 61 + 1e-12 for s in ranks_known) and ranks_known == sorted(ranks_known, reverse=True)
    assert plain[0].score > 1 / 61  # found by both lists


def test_keyword_weight_zero_is_dense_only_and_dense_weight_zero_is_bm25_only(service: MemoryService) -> None:
    target = service.add(A, {"text": "Config flag XK-4471 must stay disabled"}).id
    for i in range(30):
        service.add(A, {"text": f"general remark number {i} about configuration flags"})
    bm25 = service.search(A, {"query": "XK-4471", "dense_weight": 0, "max_results": 3})
    assert [h.entry.id for h in bm25] == [target] and bm25[0].score == pytest.approx(2 / 11)
    dense = service.search(A, {"query": "XK-4471", "keyword_weight": 0, "max_results": 3})
    assert len(dense) == 3 and dense[0].score == pytest.approx(1 / 11)


def test_stop_words_do_not_drown_the_topic(service: MemoryService) -> None:
    target = service.add(A, {"text": "Caroline researched adoption agencies"}).id
    for i in range(20):
        service.add(A, {"text": f"What did you do and what was it {i}? It was what it was."})
    hits = service.search(A, {"query": "What did Caroline research?", "dense_weight": 0})
    assert [h.entry.id for h in hits] == [target]  # BM25 searched "Caroline research" only
    raw = service.search(A, {"query": "What did Caroline research?", "dense_weight": 0, "keyword_query": "raw"})
    assert len(raw) > 1  # the raw query's stop words match the filler too


def test_date_boost_prefers_entries_of_the_named_period(service: MemoryService) -> None:
    ids = {}
    for day, text in ((3, "We went to the lake"), (10, "We went to the lake again"), (200, "We went to the lake")):
        t = T0 + timedelta(days=day)
        ids[day] = service.add(A, {"text": text, "kind": "episode", "event_time": t}).id
    for i in range(10):
        service.add(A, {"text": f"lake trip note {i}", "kind": "episode", "event_time": T0 + timedelta(days=300)})
    q = "Where did we go on 10 July, 2023?"  # the 10 July entry is inside [9 July, 25 July]
    boosted = [h.entry.id for h in service.search(A, {"query": q})]
    assert boosted[0] == ids[10]
    inside = service.search(A, {"query": q, "time_to": (T0 + timedelta(days=5)).isoformat()})
    assert ids[10] not in {h.entry.id for h in inside}  # the caller's range still bounds everything
    plain = [h.entry.id for h in service.search(A, {"query": q, "date_boost": False})]
    assert plain.index(ids[10]) > boosted.index(ids[10]) or plain[0] == ids[10]


def test_search_merges_verbatim_windows(service: MemoryService) -> None:
    events = [Event(id=f"t{i}", role="user" if i % 2 == 0 else "assistant", timestamp=T0 + timedelta(minutes=i),
                    content=text) for i, text in enumerate([
                        "I adopted a beagle puppy", "What is the puppy called?", "His name is Biscuit",
                        "Biscuit is a lovely name", "He chews my shoes", "Puppies love shoes",
                        "Unrelated: I bought a new laptop", "Which one?", "A small one for travel"])]
    mems = [op.memory for op in VerbatimExtractor("window", window=1).extract(events).operations if op.memory]
    service.add_many(A, mems)
    hits = service.search(A, {"query": "beagle puppy Biscuit chews"})
    top = hits[0].entry  # the puppy windows come back as one span: each turn once, in order
    assert hits[0].merged and top.provenance == sorted(set(top.provenance)) and {"t0", "t4"} <= set(top.provenance)
    assert len(top.text.split("\n")) == len(top.provenance)
    unmerged = service.search(A, {"query": "beagle puppy Biscuit chews", "merge_overlapping": False})
    assert len(unmerged) > len(hits) and not any(h.merged for h in unmerged)
    assert {t for h in hits for t in h.entry.provenance} == {t for h in unmerged for t in h.entry.provenance}
    assert fusion.merge_overlapping(unmerged, 10)[0].entry.provenance == hits[0].entry.provenance


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_a_pass_that_needs_the_first_hits_resolves_only_them_and_returns_the_same_prefix(
        make_service: Callable[..., MemoryService], backend: str) -> None:
    """``need``: the fused list (point ids: the dense list reads no entries) is resolved a chunk at a time, so
    only the first chunks' entries are fetched; the hits are the full pass's first ones, in its order."""
    from memcore.search import FETCH_CHUNK, search_once

    service = make_service(backend)
    words = ["ferry", "harbour", "ticket", "island", "morning", "captain", "deck", "wave"]
    service.add_many(A, [{"text": f"note {i}: the {words[i % 8]} and the {words[(i * 3) % 8]} of trip {i}"}
                         for i in range(300)])
    opts = SearchOptions(query="ferry ticket for the morning trip", max_results=10)
    qvec = service.embedder.embed_queries([opts.query])[0]
    fetched: list[int] = []
    fetch = service.vectors.get_points

    def counting(key: UserKey, pids: list[str]):  # type: ignore[no-untyped-def]
        fetched.append(len(pids))
        return fetch(key, pids)

    service.vectors.get_points = counting  # type: ignore[method-assign]
    full = search_once(service.vectors, service.keywords, service.config, A, opts, qvec, None)
    fetched_full, fetched[:] = sum(fetched), []
    first = search_once(service.vectors, service.keywords, service.config, A, opts, qvec, None, need=12)
    assert len(full) > FETCH_CHUNK and len(first) >= 12
    assert [(h.entry.id, h.score) for h in first] == [(h.entry.id, h.score) for h in full[: len(first)]]
    assert sum(fetched) < fetched_full and max(fetched) <= max(12, FETCH_CHUNK)
    # entries ``alive`` rejects are left out, and the pass still finds ``need`` hits
    dropped = {h.entry.id for h in full[:5]}
    kept = search_once(service.vectors, service.keywords, service.config, A, opts, qvec, None, need=12,
                       alive=lambda e: e.id not in dropped)
    assert [h.entry.id for h in kept] == [h.entry.id for h in full if h.entry.id not in dropped][: len(kept)]
    assert len(kept) >= 12
