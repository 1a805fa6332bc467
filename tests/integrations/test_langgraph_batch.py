"""MemclusterStore's batch contract, values and scores against a live memcluster: ``batch``/``abatch`` check
every op as ``put``/``get``/``search`` do before anything runs (a refused batch writes nothing, dotted labels
can never fold two namespaces into one key); values up to memcluster's text limit; scores are the relevance
(the query/item cosine), best first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from memclient import MemoryClient
from memclient.integrations import langgraph_values as lg
from memclient.integrations.langgraph import MemclusterStore
from memcore import fields, metadata
from tests.serve_apps.conftest import Served

APP = "lg-batch"


@pytest.fixture
def store(memcluster: Served) -> Iterator[MemclusterStore]:
    s = MemclusterStore.connect(memcluster.url, app=APP)
    yield s
    s.close()


def _entries(memcluster: Served, user: str) -> list[Any]:
    with MemoryClient(memcluster.url) as mc:
        return mc.read(APP, user)


def test_the_client_limits_are_the_servers() -> None:
    assert lg.MAX_TEXT_BYTES == fields.MAX_TEXT_BYTES
    assert lg.INLINE_VALUE_BYTES <= metadata.MAX_STRING_CHARS and lg.INLINE_DEPTH + 1 <= metadata.MAX_DEPTH


BAD_OPS = [
    PutOp(("u-bad", "a.b", "c"), "k", {"v": 1}),
    PutOp(("u-bad", "a", "b.c"), "k", None),
    GetOp(("u-bad", "a", "b.c"), "k"),
    SearchOp(("u-bad", "a.b")),
    ListNamespacesOp((MatchCondition("prefix", ("u-bad", "a.b")),)),
    PutOp(("u-bad", ""), "k", {"v": 1}),
    PutOp(("u-bad", 1), "k", {"v": 1}),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("bad", BAD_OPS, ids=lambda op: type(op).__name__)
async def test_a_batch_with_a_bad_label_is_refused_whole(memcluster: Served, store: MemclusterStore, bad: Any) -> None:
    first = PutOp(("u-bad", "ok"), "first", {"text": "written only if the batch is"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([first, bad])
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([first, bad])
    assert _entries(memcluster, "u-bad") == []


def test_dotted_labels_never_merge_namespaces(memcluster: Served, store: MemclusterStore) -> None:
    """``("u","a.b","c")`` and ``("u","a","b.c")`` fold to the same ``a.b.c``: both are refused by every op,
    sync and async, as ``put`` refuses them; the valid neighbours stay apart."""
    for ns in [("u-fold", "a.b", "c"), ("u-fold", "a", "b.c")]:
        for op in (PutOp(ns, "k", {"text": "x"}), GetOp(ns, "k"), SearchOp(ns, query="x")):
            with pytest.raises(InvalidNamespaceError):
                store.batch([op])
        with pytest.raises(InvalidNamespaceError):
            store.put(ns, "k", {"text": "x"})
    assert _entries(memcluster, "u-fold") == []
    store.put(("u-fold", "a", "b", "c"), "k", {"text": "deep"})
    store.put(("u-fold", "a", "b"), "k", {"text": "shallow"})
    assert store.get(("u-fold", "a", "b", "c"), "k").value == {"text": "deep"}  # type: ignore[union-attr]
    assert store.get(("u-fold", "a", "b"), "k").value == {"text": "shallow"}  # type: ignore[union-attr]
    assert store.get(("u-fold", "a"), "k") is None
    assert {i.namespace for i in store.search(("u-fold", "a", "b", "c"))} == {("u-fold", "a", "b", "c")}


def test_an_item_written_with_a_dotted_label_is_never_another_namespaces(memcluster: Served,
                                                                         store: MemclusterStore) -> None:
    """An entry an older adapter wrote through ``batch`` under ``("u", "a.b", "c")`` (same ``.``-joined
    prefixes as ``("u", "a", "b.c")``) is returned for its own path only."""
    path = ["a.b", "c"]
    with MemoryClient(memcluster.url) as mc:
        mc.add(APP, "u-legacy", "legacy", key=json.dumps([*path, "k"]), source="user",
               metadata={"lg": True, "lg_depth": 2, "lg_key": "k", "lg_p1": "a.b", "lg_p2": "a.b.c",
                         "value": {"text": "legacy"}})
    scope = store.scope(("u-legacy", "a", "b.c"))  # the mapping alone (the op itself is refused)
    with MemoryClient(memcluster.url) as mc:
        assert store.pick(scope, "k", mc.read(APP, "u-legacy")) is None
        assert store.pick(store.scope(("u-legacy", *path)), "k", mc.read(APP, "u-legacy")) is not None


async def test_a_refused_value_or_filter_writes_nothing(memcluster: Served, store: MemclusterStore) -> None:
    first = PutOp(("u-refuse",), "first", {"text": "kept only if the batch is"})
    too_big = PutOp(("u-refuse",), "big", {"text": "x" * (fields.MAX_TEXT_BYTES + 1)})
    not_json = PutOp(("u-refuse",), "obj", {"when": object()})
    bad_filter = SearchOp(("u-refuse",), filter={"n": {"$regex": "x"}})
    for bad, error in ((too_big, ValueError), (not_json, TypeError), (bad_filter, ValueError)):
        with pytest.raises(error):
            store.batch([first, bad])
        with pytest.raises(error):
            await store.abatch([first, bad])
    assert _entries(memcluster, "u-refuse") == []


LONG = "The quarterly plan: " + "ship the store adapter, measure it, write it down. " * 100  # ~5 KB


async def test_long_and_deep_values_round_trip(memcluster: Served, store: MemclusterStore) -> None:
    ns = ("u-long", "notes")
    deep = {"a": {"b": {"c": {"d": {"e": ["f", {"g": 1.5}]}}}}, "key with spaces.and.dots": True}
    store.put(ns, "long", {"text": LONG, "n": 3})
    store.put(ns, "deep", deep)
    await store.aput(ns, "along", {"text": LONG.upper()})
    assert store.get(ns, "long").value == {"text": LONG, "n": 3}  # type: ignore[union-attr]
    assert store.get(ns, "deep").value == deep  # type: ignore[union-attr]
    assert (await store.aget(ns, "along")).value == {"text": LONG.upper()}  # type: ignore[union-attr]
    hits = store.search(ns, query="quarterly plan store adapter")
    assert {h.key for h in hits} >= {"long", "along"}
    assert [h.value for h in hits if h.key == "long"] == [{"text": LONG, "n": 3}]
    assert [i.key for i in store.search(ns, filter={"n": {"$gte": 3}})] == ["long"]
    # where it lives: small values in metadata, larger ones as the entry's text (after the indexed fields)
    store.put(ns, "fields", {"title": "plan", "body": LONG}, index=["title"])
    by_key = {e.metadata["lg_key"]: e for e in _entries(memcluster, "u-long")}
    assert by_key["long"].text == json.dumps({"text": LONG, "n": 3}, ensure_ascii=False, separators=(",", ":"))
    assert "value" not in by_key["long"].metadata and by_key["long"].metadata["lg_vt"] == len(by_key["long"].text)
    assert by_key["fields"].text.startswith("plan\n{") and store.get(ns, "fields").value["body"] == LONG  # type: ignore[union-attr]
    store.put(ns, "small", {"text": "short"})
    assert {e.metadata["lg_key"]: e for e in _entries(memcluster, "u-long")}["small"].metadata["value"] == {
        "text": "short"}
    # a TTL refresh rewrites the long item unchanged
    store.put(ns, "ttl", {"text": LONG}, ttl=5)
    assert store.get(ns, "ttl", refresh_ttl=True).value == {"text": LONG}  # type: ignore[union-attr]


def test_scores_are_the_relevance_best_first(memcluster: Served, store: MemclusterStore) -> None:
    ns = ("u-score", "facts")
    store.put(ns, "peanut", {"text": "Alice is allergic to peanuts"})
    store.put(ns, "pizza", {"text": "Alice loves pizza margherita"})
    store.put(ns, "lisbon", {"text": "Alice flies to Lisbon in May"})
    store.put(ns, "hidden", {"text": "peanuts allergy card in the wallet"}, index=False)
    hits = store.search(("u-score",), query="peanuts allergy")
    assert hits[0].key == "peanut"
    scores = [h.score for h in hits]
    assert scores[-1] is None and hits[-1].key == "hidden"  # index=False: unscored, after the scored ones
    scored = [s for s in scores if s is not None]
    assert scored == sorted(scored, reverse=True) and all(-1.0 <= s <= 1.0 for s in scored)
    with MemoryClient(memcluster.url) as mc:
        raw = {h.entry.metadata["lg_key"]: h.relevance
               for h in mc.search(APP, "u-score", "peanuts allergy", hybrid=False, similarity_threshold=-1.0)}
    assert {h.key: h.score for h in hits if h.score is not None} == pytest.approx(
        {k: v for k, v in raw.items() if k != "hidden"})
    # an unrelated query scores lower than a matching one
    assert store.search(("u-score",), query="quantum chromodynamics")[0].score < hits[0].score  # type: ignore[operator]
