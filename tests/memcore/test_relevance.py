"""A hit's relevance (memcore.relevance) through a real MemoryService (Qdrant Edge or a Qdrant client + Tantivy):
on its scale for every hit, the query/memory cosine (less the penalty for the query's names a memory lacks),
keyword-only hits included; the threshold filters on it."""

from __future__ import annotations

import numpy as np
import pytest

from memcore import relevance
from memcore.model import UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")
TEXTS = ["Alice drinks green tea every morning", "Alice adopted a cat named Miso", "The cat sleeps on the sofa",
         "Bob plays the violin", "Alice moved to Lisbon in 2021", "green tea tastes grassy", "Miso likes tuna"]


def _fill(service: MemoryService) -> dict[str, str]:
    return {service.add(A, {"text": t}).id: t for t in TEXTS}


def _cos(service: MemoryService, query: str, text: str) -> float:
    q = service.embedder.embed_queries([query])[0]
    p = service.embedder.embed_passages([text])[0]
    return float(np.dot(q, p) / (np.linalg.norm(q) * np.linalg.norm(p)))


def test_cosines_are_on_the_scale() -> None:
    q = np.asarray([1.0, 0.0], dtype=np.float32)
    rows = np.asarray([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    assert relevance.cosines(q, rows) == pytest.approx([1.0, 0.0, -1.0, 0.6])
    assert relevance.cosines(q, np.zeros((0, 2), dtype=np.float32)) == []
    assert relevance.floor_of(None, hybrid=True) is None
    assert relevance.floor_of(None, hybrid=False) == relevance.DENSE_THRESHOLD
    assert relevance.floor_of(0.5, hybrid=True) == 0.5
    assert relevance.MIN_RELEVANCE <= relevance.DEFAULT_FLOOR <= relevance.MAX_RELEVANCE


def test_the_judge_takes_the_share_of_missing_names_off_the_cosine() -> None:
    judge = relevance.Judge({"andrew", "buddy"})
    assert judge(0.5, "Andrew: Buddy loves the park") == 0.5
    assert judge(0.5, "andrew walked alone") == pytest.approx(0.5 - relevance.NAME_PENALTY / 2)  # any case
    assert judge(0.5, "James: my dogs love the park") == pytest.approx(0.5 - relevance.NAME_PENALTY)
    assert judge(0.5, "Andrews and Buddyish") == pytest.approx(0.5 - relevance.NAME_PENALTY)  # whole words only
    assert judge(-0.98, "nothing") == relevance.MIN_RELEVANCE  # never off the scale
    assert relevance.Judge(()).penalty("anything") == 0.0 and relevance.Judge(())(0.42, "x") == 0.42


@pytest.mark.parametrize("options", [{}, {"hybrid": False, "similarity_threshold": -1.0}],
                         ids=["hybrid", "dense"])
def test_a_memory_without_the_querys_name_loses_the_penalty(service: MemoryService, options: dict[str, object]) -> None:
    texts = _fill(service)
    query = "Does Alice like green tea?"  # names alice: "green tea tastes grassy" lacks her
    hits = {h.entry.id: h for h in service.search(A, {"query": query, "max_results": 20, "merge_overlapping": False,
                                                       **options})}
    assert any("Alice" in texts[i] for i in hits) and any("Alice" not in texts[i] for i in hits)
    for i, h in hits.items():
        missing = relevance.NAME_PENALTY if "Alice" not in texts[i] else 0.0
        assert h.relevance == pytest.approx(_cos(service, query, texts[i]) - missing, abs=1e-4)


@pytest.mark.parametrize("options", [{}, {"hybrid": False, "similarity_threshold": -1.0}, {"dense_weight": 0.0}],
                         ids=["hybrid", "dense", "keywords-only"])
def test_every_hit_carries_its_cosine(service: MemoryService, options: dict[str, object]) -> None:
    texts = _fill(service)
    hits = service.search(A, {"query": "green tea cat", "max_results": 20, "merge_overlapping": False, **options})
    assert hits
    for h in hits:  # keywords-only: every hit came from BM25, its relevance from the stored vector
        assert h.relevance is not None and relevance.MIN_RELEVANCE <= h.relevance <= relevance.MAX_RELEVANCE
        assert h.relevance == pytest.approx(_cos(service, "green tea cat", texts[h.entry.id]), abs=1e-4)
    if options.get("hybrid") is False:
        assert all(h.score == h.relevance for h in hits)


def test_threshold_filters_hybrid_hits_and_leaves_the_ranking(service: MemoryService) -> None:
    _fill(service)
    q = {"query": "Does Alice like green tea?", "max_results": 20}
    plain = service.search(A, q)
    assert len(plain) >= 3
    assert [(h.entry.id, h.score) for h in service.search(A, {**q, "similarity_threshold": -1.0})] == [
        (h.entry.id, h.score) for h in plain]  # a floor nothing is below changes nothing
    rels = sorted(h.relevance for h in plain if h.relevance is not None)
    floor = (rels[len(rels) // 2] + rels[-1]) / 2  # some hits above, some below
    kept = service.search(A, {**q, "similarity_threshold": floor})
    assert kept and all(h.relevance is not None and h.relevance >= floor for h in kept)
    assert [h.entry.id for h in kept] == [h.entry.id for h in plain if h.relevance is not None and h.relevance >= floor]
    assert service.search(A, {**q, "similarity_threshold": 1.0}) == []


def test_dense_search_keeps_the_seeds_threshold(service: MemoryService) -> None:
    _fill(service)
    hits = service.search(A, {"query": "green tea", "hybrid": False})
    assert hits and all(h.score >= relevance.DENSE_THRESHOLD for h in hits)
    assert SearchOptions().similarity_threshold is None
    every = service.search(A, {"query": "green tea", "hybrid": False, "similarity_threshold": -1.0})
    assert len(every) > len(hits)  # the texts without tea fall below 0.3 with the hashing embedder
