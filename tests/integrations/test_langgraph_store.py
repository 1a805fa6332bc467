"""MemclusterStore against a live memcluster: every BaseStore method sync and async, put-by-key
replaces, namespace-prefix and value-field filters, scores, list_namespaces, errors never empty."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from langgraph.store.base import BaseStore, InvalidNamespaceError, Item, SearchItem

from memclient import AsyncMemoryClient, InvalidRequest, MemoryClient, Unavailable
from memclient.integrations.langgraph import MemclusterStore
from tests.serve_apps.conftest import Served


@pytest.fixture
def store(memcluster: Served) -> Iterator[MemclusterStore]:
    s = MemclusterStore.connect(memcluster.url, app="lg-app")
    yield s
    s.close()


def test_is_a_langgraph_store(store: MemclusterStore) -> None:
    assert isinstance(store, BaseStore) and store.supports_ttl is True


def test_put_get_replace_delete(store: MemclusterStore) -> None:
    ns = ("u-crud", "prefs")
    assert store.get(ns, "drink") is None
    store.put(ns, "drink", {"text": "green tea", "strength": 2})
    item = store.get(ns, "drink")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (ns, "drink", {"text": "green tea", "strength": 2})
    store.put(ns, "drink", {"text": "black coffee"})
    again = store.get(ns, "drink")
    assert again is not None and again.value == {"text": "black coffee"}
    assert again.created_at == item.created_at and again.updated_at >= item.updated_at
    assert [i.key for i in store.search(ns)] == ["drink"]  # replaced, not added
    # the same key in another namespace is another item
    store.put(("u-crud", "other"), "drink", {"text": "water"})
    assert store.get(ns, "drink").value == {"text": "black coffee"}  # type: ignore[union-attr]
    store.delete(ns, "drink")
    assert store.get(ns, "drink") is None
    assert store.get(("u-crud", "other"), "drink") is not None
    store.delete(ns, "never-there")  # deleting a missing item is a no-op, as in LangGraph


def test_search_query_scores_prefix_and_filter(store: MemclusterStore) -> None:
    store.put(("u-s", "food"), "a", {"text": "Alice is allergic to peanuts", "kind": "health"})
    store.put(("u-s", "food", "likes"), "b", {"text": "Alice loves pizza margherita", "kind": "taste"})
    store.put(("u-s", "travel"), "c", {"text": "Alice flies to Lisbon in May", "kind": "plan"})
    hits = store.search(("u-s",), query="peanuts allergy")
    assert hits and isinstance(hits[0], SearchItem) and hits[0].key == "a"
    assert all(isinstance(h.score, float) for h in hits)
    assert hits[0].score >= hits[-1].score  # type: ignore[operator]
    # namespace prefix: ("u-s", "food") covers food and food/likes, not travel
    assert {h.key for h in store.search(("u-s", "food"), query="Alice")} == {"a", "b"}
    assert {h.key for h in store.search(("u-s", "food", "likes"))} == {"b"}
    # equality filter on value fields, with and without a query
    assert [h.key for h in store.search(("u-s",), filter={"kind": "plan"})] == ["c"]
    assert [h.key for h in store.search(("u-s",), query="Alice", filter={"kind": {"$eq": "taste"}})] == ["b"]
    assert {h.key for h in store.search(("u-s",), filter={"kind": {"$ne": "plan"}})} == {"a", "b"}
    assert len(store.search(("u-s",), limit=2)) == 2
    assert len(store.search(("u-s",), limit=2, offset=2)) == 1
    with pytest.raises(ValueError, match=r"\$in"):
        store.search(("u-s",), filter={"kind": {"$in": ["plan"]}})


def test_index_fields_choose_what_search_ranks(memcluster: Served, store: MemclusterStore) -> None:
    store.put(("u-idx",), "k", {"title": "quarterly report", "body": "zebra"}, index=["title"])
    store.put(("u-idx",), "all", {"title": "minutes", "body": "giraffe"})
    assert store.search(("u-idx",), query="quarterly report")[0].key == "k"
    with MemoryClient(memcluster.url) as mc:
        texts = {e.metadata["lg_key"]: e.text for e in mc.read("lg-app", "u-idx")}
    assert texts == {"k": "quarterly report", "all": "title: minutes\nbody: giraffe"}


def test_users_and_apps_are_isolated(memcluster: Served, store: MemclusterStore) -> None:
    store.put(("u-iso-1", "notes"), "n", {"text": "the vault code is 4711"})
    assert store.search(("u-iso-2",), query="vault code") == []
    assert store.get(("u-iso-2", "notes"), "n") is None
    other_app = MemclusterStore.connect(memcluster.url, app="lg-other")
    try:
        assert other_app.search(("u-iso-1",), query="vault code") == []
    finally:
        other_app.close()
    # without a fixed app the namespace starts with the app
    free = MemclusterStore(MemoryClient(memcluster.url))
    try:
        assert free.get(("lg-app", "u-iso-1", "notes"), "n") is not None
        with pytest.raises(InvalidNamespaceError):
            free.get(("only-app",), "n")
    finally:
        free.close()


def test_list_namespaces(store: MemclusterStore) -> None:
    for ns in [("u-ls", "a"), ("u-ls", "a", "x"), ("u-ls", "b", "draft")]:
        store.put(ns, "k", {"text": "t"})
    assert store.list_namespaces(prefix=("u-ls",)) == [("u-ls", "a"), ("u-ls", "a", "x"), ("u-ls", "b", "draft")]
    assert store.list_namespaces(prefix=("u-ls",), suffix=("draft",)) == [("u-ls", "b", "draft")]
    assert store.list_namespaces(prefix=("u-ls",), max_depth=2) == [("u-ls", "a"), ("u-ls", "b")]
    assert store.list_namespaces(prefix=("u-ls", "a")) == [("u-ls", "a"), ("u-ls", "a", "x")]
    with pytest.raises(ValueError, match="app and user"):
        store.list_namespaces()


def test_same_key_in_two_namespaces_is_two_items(store: MemclusterStore) -> None:
    a, b, deeper = ("u-two", "home"), ("u-two", "work"), ("u-two", "home", "work")
    store.put(a, "desk", {"text": "the desk at home is by the window"})
    store.put(b, "desk", {"text": "the desk at work is in room 4"})
    store.put(deeper, "desk", {"text": "the home office desk"})
    assert store.get(a, "desk").value["text"] == "the desk at home is by the window"  # type: ignore[union-attr]
    assert store.get(b, "desk").value["text"] == "the desk at work is in room 4"  # type: ignore[union-attr]
    every = store.search(("u-two",), limit=10)
    assert sorted((i.namespace, i.key) for i in every) == [(a, "desk"), (deeper, "desk"), (b, "desk")]
    assert {i.namespace for i in store.search(a)} == {a, deeper}  # a prefix covers its sub-namespaces only
    assert store.list_namespaces(prefix=("u-two",)) == [a, deeper, b]
    store.put(a, "desk", {"text": "the desk at home moved to the attic"})  # replaces a's item only
    assert len(store.search(("u-two",), limit=10)) == 3
    assert store.get(b, "desk").value["text"] == "the desk at work is in room 4"  # type: ignore[union-attr]
    store.delete(b, "desk")
    assert store.get(b, "desk") is None and store.get(a, "desk") is not None and store.get(deeper, "desk")


def _expiry(memcluster: Served, user: str) -> dict[str, object]:
    with MemoryClient(memcluster.url) as mc:
        return {e.metadata["lg_key"]: e.expires_at for e in mc.read("lg-app", user)}


def test_ttl_minutes_expire_the_item_on_every_read(store: MemclusterStore, memcluster: Served) -> None:
    ns = ("u-ttl", "session")
    store.put(ns, "brief", {"text": "the parking spot is B12"}, ttl=0.02)  # 1.2 s
    store.put(ns, "lasting", {"text": "the home address is Rua Augusta 1"})
    got = _expiry(memcluster, "u-ttl")
    assert got["lasting"] is None and got["brief"] is not None
    assert store.get(ns, "brief", refresh_ttl=False) is not None
    time.sleep(1.5)
    assert store.get(ns, "brief") is None
    assert [i.key for i in store.search(("u-ttl",))] == ["lasting"]
    assert [i.key for i in store.search(("u-ttl",), query="parking spot B12")] == ["lasting"]
    store.put(("u-ttl", "gone"), "k", {"text": "short"}, ttl=0.01)
    time.sleep(1.0)
    assert store.list_namespaces(prefix=("u-ttl",)) == [ns]
    # a put without ttl replaces the expiry: the item no longer expires
    store.put(ns, "brief", {"text": "the parking spot is C3"}, ttl=0.02)
    store.put(ns, "brief", {"text": "the parking spot is C3"})
    assert _expiry(memcluster, "u-ttl")["brief"] is None


def test_refresh_ttl_on_get_and_search(store: MemclusterStore, memcluster: Served) -> None:
    ns = ("u-refresh",)
    store.put(ns, "k", {"text": "the locker code is 2291"}, ttl=1.0)
    first = _expiry(memcluster, "u-refresh")["k"]
    time.sleep(0.05)
    assert store.get(ns, "k", refresh_ttl=False) is not None
    assert _expiry(memcluster, "u-refresh")["k"] == first  # not refreshed
    assert store.get(ns, "k") is not None  # LangGraph's default: refresh
    second = _expiry(memcluster, "u-refresh")["k"]
    assert second > first  # type: ignore[operator]
    time.sleep(0.05)
    assert [i.key for i in store.search(ns, query="locker code", refresh_ttl=True)] == ["k"]
    assert _expiry(memcluster, "u-refresh")["k"] > second  # type: ignore[operator]
    assert store.get(ns, "k").value == {"text": "the locker code is 2291"}  # type: ignore[union-attr]


async def test_async_ttl_and_refresh(store: MemclusterStore, memcluster: Served) -> None:
    ns = ("u-attl",)
    await store.aput(ns, "k", {"text": "the taxi arrives at nine"}, ttl=0.05)  # 3 s
    assert (await store.aget(ns, "k", refresh_ttl=False)) is not None
    before = _expiry(memcluster, "u-attl")["k"]
    await asyncio.sleep(0.05)
    assert [i.key for i in await store.asearch(ns, query="taxi", refresh_ttl=True)] == ["k"]
    assert _expiry(memcluster, "u-attl")["k"] > before  # type: ignore[operator]
    await asyncio.sleep(3.2)
    assert await store.aget(ns, "k") is None
    assert await store.asearch(ns) == []


def test_bad_ttl_is_a_clear_422(store: MemclusterStore) -> None:
    with pytest.raises(InvalidRequest) as info:
        store.put(("u-badttl",), "k", {"text": "t"}, ttl=-1)
    assert info.value.status == 422 and info.value.field == "ttl_s"
    assert store.get(("u-badttl",), "k") is None


def test_errors_are_raised_not_empty(memcluster: Served) -> None:
    s = MemclusterStore.connect(memcluster.url, app="lg-app")
    try:
        with pytest.raises(InvalidRequest) as info:  # a caller key over memcluster's 512 characters
            s.put(("u-err",), "k" * 600, {"text": "x"})
        assert info.value.status == 422 and info.value.field == "key"
    finally:
        s.close()

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": "StoreError", "field": "store", "message": "down"})

    broken = MemclusterStore(MemoryClient(transport=httpx.MockTransport(failing)), app="x")
    with pytest.raises(Unavailable):
        broken.search(("u",), query="anything")
    with pytest.raises(Unavailable):
        broken.get(("u",), "k")


async def test_async_twins(memcluster: Served) -> None:
    s = MemclusterStore(aclient=AsyncMemoryClient(memcluster.url), app="lg-app")
    ns = ("u-async", "prefs")
    await s.aput(ns, "color", {"text": "Alice's favourite colour is teal"})
    got = await s.aget(ns, "color")
    assert got is not None and got.value["text"].endswith("teal")
    await s.aput(ns, "color", {"text": "Alice's favourite colour is now amber"})
    hits = await s.asearch(("u-async",), query="favourite colour")
    assert [h.key for h in hits] == ["color"] and "amber" in hits[0].value["text"]
    assert await s.alist_namespaces(prefix=("u-async",)) == [ns]
    await s.adelete(ns, "color")
    assert await s.aget(ns, "color") is None
    with pytest.raises(RuntimeError, match="sync"):
        s.get(ns, "color")
    await s.aclose()


def test_sync_only_store_refuses_async_clearly(memcluster: Served) -> None:
    s = MemclusterStore(MemoryClient(memcluster.url), app="lg-app")
    import asyncio

    with pytest.raises(RuntimeError, match="AsyncMemoryClient"):
        asyncio.run(s.aget(("u",), "k"))
    s.close()


