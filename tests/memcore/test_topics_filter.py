"""Search by topic: a hard filter in the vector store (Qdrant Edge and qdrant-client) and in the
keyword index (Tantivy), so the filtered results are not what is left of a thinned list."""

from __future__ import annotations

import pytest

from memcore.errors import ValidationError
from memcore.model import Kind, UserKey
from memcore.search_model import SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")


def _plant(svc: MemoryService) -> dict[str, str]:
    """150 untagged memories that match "coffee" strongly, then three tagged ones that match weakly."""
    svc.add_many(A, [{"text": f"coffee coffee espresso coffee note {i}"} for i in range(150)])
    tagged = {
        "lisbon": svc.add(A, {"text": "coffee in Lisbon by the river and a long walk", "topics": ["travel", "food"]}),
        "porto": svc.add(A, {"text": "coffee at a station in Porto before the train", "topics": ["travel"]}),
        "bread": svc.add(A, {"text": "coffee with bread baked at home on Sunday", "topics": ["food"],
                             "kind": "episode", "event_time": "2024-03-03T10:00:00Z"}),
    }
    svc.add(B, {"text": "coffee on a trip with bob", "topics": ["travel"]})
    return {k: e.id for k, e in tagged.items()}


def test_stores_filter_by_topic_before_ranking(service: MemoryService) -> None:
    ids = _plant(service)
    qvec = service.embedder.embed_queries(["coffee coffee espresso"])[0]
    # limit 2 with 150 better-scoring untagged entries: a post-filter would find nothing.
    dense = service.vectors.search(A, qvec, limit=2, topics=["travel"])
    assert {e.id for e, _ in dense} == {ids["lisbon"], ids["porto"]}
    dense_all = service.vectors.search(A, qvec, limit=5, topics=["travel", "food"], topics_match="all")
    assert [e.id for e, _ in dense_all] == [ids["lisbon"]]
    dense_any = service.vectors.search(A, qvec, limit=5, topics=["travel", "food"], topics_match="any")
    assert {e.id for e, _ in dense_any} == set(ids.values())
    assert service.vectors.search(A, qvec, limit=5, topics=["Travel"]) == []  # exact, case-sensitive
    sparse = service.keywords.search(A, "coffee espresso", limit=2, topics=["travel"])
    assert {i for i, _ in sparse} == {ids["lisbon"], ids["porto"]}
    sparse_all = service.keywords.search(A, "coffee", limit=5, topics=["food", "travel"], topics_match="all")
    assert [i for i, _ in sparse_all] == [ids["lisbon"]]
    assert service.keywords.search(A, "coffee", limit=5, topics=["food"], kind=Kind.EPISODE)[0][0] == ids["bread"]


@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "dense"])
def test_search_topics_any_and_all(service: MemoryService, hybrid: bool) -> None:
    ids = _plant(service)
    base = {"query": "coffee espresso", "hybrid": hybrid, "similarity_threshold": -1.0, "max_results": 3}
    anyof = service.search(A, {**base, "topics": ["travel", "food"]})
    assert {h.entry.id for h in anyof} == set(ids.values())
    allof = service.search(A, {**base, "topics": ["travel", "food"], "topics_match": "all"})
    assert [h.entry.id for h in allof] == [ids["lisbon"]]
    travel = service.search(A, {**base, "topics": ["travel"]})
    assert {h.entry.id for h in travel} == {ids["lisbon"], ids["porto"]}  # bob's is another scope
    # The kind fallback keeps the topic filter: the unfiltered-kind pass is still topic-filtered.
    episodes = service.search(A, {**base, "topics": ["travel", "food"], "kind": "episode"})
    assert episodes[0].entry.id == ids["bread"]
    assert {h.entry.id for h in episodes} <= set(ids.values())
    # No filter (None or empty): the untagged entries win.
    assert not {h.entry.id for h in service.search(A, {**base, "topics": []})} & set(ids.values())


def test_topic_filter_follows_updates_and_deletes(service: MemoryService) -> None:
    ids = _plant(service)
    service.update(A, ids["porto"], {"topics": ["work"]})
    service.delete(A, ids["lisbon"])
    hits = service.search(A, {"query": "coffee", "topics": ["travel"], "similarity_threshold": -1.0})
    assert hits == []
    work = service.search(A, {"query": "coffee", "topics": ["work"], "similarity_threshold": -1.0})
    assert [h.entry.id for h in work] == [ids["porto"]]


def test_topics_option_is_validated() -> None:
    assert SearchOptions(query="q", topics=[" travel "]).topics == ["travel"]
    assert SearchOptions(query="q", topics=[]).topics is None
    with pytest.raises(ValueError, match="topics_match"):
        SearchOptions(query="q", topics=["a"], topics_match="some")  # type: ignore[arg-type]


def test_bad_topics_name_the_field(service: MemoryService) -> None:
    with pytest.raises(ValidationError) as err:
        service.search(A, {"query": "q", "topics": ["x" * 65]})
    assert err.value.field is not None and err.value.field.startswith("topics")
    with pytest.raises(ValidationError) as err:
        service.search(A, {"query": "q", "topics": "travel"})
    assert err.value.field is not None and err.value.field.startswith("topics")
