"""Moving LangGraph items stored by the old user rule (``memclient.integrations.langgraph_migration``) against a
live memcluster: items written as the store wrote them before ``user_from`` (the namespace's first label was the
memcluster user) are unreachable by today's store; after the migration get, search and list_namespaces see them
under the current rule, erasing the real user removes them, and a second run moves nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from memclient import AsyncMemoryClient, MemoryClient
from memclient.integrations.langgraph import MemclusterStore
from memclient.integrations.langgraph_migration import amigrate_legacy_items, migrate_legacy_items
from memclient.integrations.langgraph_values import text_of
from tests.serve_apps.conftest import Served

APP = "lg-migrate"


def old_put(mc: MemoryClient, namespace: Sequence[str], key: str, value: Mapping[str, Any], *,
            app: str | None = APP, ttl: float | None = None) -> None:
    """``MemclusterStore.put`` as it was before commit e3a9790: with ``app`` the namespace is
    ``(user, *path)``, without it ``(app, user, *path)``; the caller key is ``[*path, key]``."""
    ns = tuple(namespace)
    scope_app, user, path = (app, ns[0], ns[1:]) if app is not None else (ns[0], ns[1], ns[2:])
    assert scope_app is not None
    meta: dict[str, Any] = {"lg": True, "lg_depth": len(path), "lg_key": key,
                            **{f"lg_p{i}": ".".join(path[:i]) for i in range(1, len(path) + 1)}, "value": dict(value)}
    if ttl is not None:
        meta["lg_ttl"] = ttl
    mc.add(scope_app, user, text_of(value, None, key), key=json.dumps([*path, key], ensure_ascii=False),
           metadata=meta, source="user", ttl_s=None if ttl is None else ttl * 60.0)


@pytest.fixture
def mc(memcluster: Served) -> Iterator[MemoryClient]:
    with MemoryClient(memcluster.url) as client:
        yield client


@pytest.fixture
def store(memcluster: Served) -> Iterator[MemclusterStore]:
    s = MemclusterStore.connect(memcluster.url, app=APP)
    yield s
    s.close()


def test_old_items_move_to_the_real_user(mc: MemoryClient, store: MemclusterStore) -> None:
    old_put(mc, ("memories", "bob"), "name", {"data": "User name is Bob"})
    old_put(mc, ("memories", "bob", "prefs"), "drink", {"data": "Bob drinks oat-milk flat whites"})
    old_put(mc, ("profile", "bob"), "city", {"data": "Bob lives in Porto"})
    old_put(mc, ("memories", "cy"), "trip", {"data": "Cy flies to Oslo"}, ttl=60)
    old_put(mc, ("memories",), "orphan", {"data": "no user in this namespace"})
    old_put(mc, ("dee", "memories"), "pet", {"data": "Dee has a cat"})  # the same place under both rules
    before = {e.metadata["lg_key"]: e for e in mc.read(APP, "memories")}
    assert store.get(("memories", "bob"), "name") is None  # unreachable before the migration
    assert store.get(("dee", "memories"), "pet") is not None

    report = migrate_legacy_items(store)
    assert (report.migrated, report.superseded, report.unmapped, report.current, report.expired) == (4, 0, 1, 0, 0)
    assert report.scanned == 5 and report.complete and "memories" in report.users

    item = store.get(("memories", "bob"), "name")
    assert item is not None and (item.namespace, item.value) == (("memories", "bob"), {"data": "User name is Bob"})
    assert [h.key for h in store.search(("memories", "bob"), query="oat-milk flat whites")][:1] == ["drink"]
    assert {h.key for h in store.search(("memories", "bob"))} == {"name", "drink"}
    assert store.list_namespaces(prefix=("memories", "bob")) == [("memories", "bob"), ("memories", "bob", "prefs")]
    assert store.get(("profile", "bob"), "city").value == {"data": "Bob lives in Porto"}  # type: ignore[union-attr]
    # the same value, text and remaining expiry; the TTL of the item (minutes) is kept for refreshes
    (trip,) = [e for e in mc.read(APP, "cy") if e.metadata["lg_key"] == "trip"]
    old_trip = before["trip"]
    assert trip.text == old_trip.text and trip.metadata["value"] == old_trip.metadata["value"]
    assert trip.metadata["lg_ttl"] == 60 and trip.expires_at is not None and old_trip.expires_at is not None
    assert abs((trip.expires_at - old_trip.expires_at).total_seconds()) < 5
    assert trip.expires_at > datetime.now(UTC)
    # only what names no user stays in the user called "memories"
    assert [e.metadata["lg_key"] for e in mc.read(APP, "memories")] == ["orphan"]
    assert mc.read(APP, "profile") == []
    assert MemclusterStore(mc, app=APP, user_from=0).get(("memories",), "orphan") is not None

    again = migrate_legacy_items(store)
    assert (again.migrated, again.superseded, again.unmapped, again.scanned) == (0, 0, 1, 1)

    assert mc.forget(APP, "bob")["entries"] == 3  # erasing the real user removes the moved items
    assert store.get(("memories", "bob"), "name") is None and store.search(("memories", "bob")) == []
    assert store.get(("profile", "bob"), "city") is None
    assert store.get(("memories", "cy"), "trip") is not None  # another user


def test_an_item_already_at_its_new_place_wins(mc: MemoryClient, store: MemclusterStore) -> None:
    """A run stopped after writing, or a ``put`` since the upgrade: the new place is kept, the old copy deleted."""
    old_put(mc, ("memories", "eve"), "food", {"data": "Eve is vegetarian"})
    store.put(("memories", "eve"), "food", {"data": "Eve eats fish now"})
    old_put(mc, ("memories", "eve"), "sport", {"data": "Eve rows"})
    report = migrate_legacy_items(store, users=["memories"])
    assert (report.migrated, report.superseded, report.users) == (1, 1, ["memories"])
    assert store.get(("memories", "eve"), "food").value == {"data": "Eve eats fish now"}  # type: ignore[union-attr]
    assert store.get(("memories", "eve"), "sport").value == {"data": "Eve rows"}  # type: ignore[union-attr]
    assert [e for e in mc.read(APP, "memories") if e.metadata.get("lg_key") in ("food", "sport")] == []
    assert len(mc.read(APP, "eve")) == 2


def test_user_from_and_other_first_labels(mc: MemoryClient, memcluster: Served) -> None:
    """With ``user_from=1`` the old first label can be any label: the caller names those users."""
    old_put(mc, ("team-a", "gus"), "desk", {"data": "Gus sits by the window"})
    old_put(mc, ("team-a", "gus"), "chair", {"data": "Gus has a red chair"})
    store = MemclusterStore(MemoryClient(memcluster.url), app=APP, user_from=1)
    try:
        assert store.get(("team-a", "gus"), "desk") is None
        report = migrate_legacy_items(store, users=["team-a"])
        assert (report.migrated, report.scanned) == (2, 2)
        assert store.get(("team-a", "gus"), "desk").value == {"data": "Gus sits by the window"}  # type: ignore[union-attr]
        assert store.list_namespaces(prefix=("team-a", "gus")) == [("team-a", "gus")]
        assert mc.read(APP, "team-a") == [] and len(mc.read(APP, "gus")) == 2
        assert migrate_legacy_items(store, users=["team-a"]).migrated == 0
    finally:
        store.close()


def test_async_migration_of_a_store_without_app(mc: MemoryClient, memcluster: Served) -> None:
    other = "lg-migrate-free"
    old_put(mc, (other, "memories", "fay"), "name", {"data": "Fay is a pilot"}, app=None)
    store = MemclusterStore(aclient=AsyncMemoryClient(memcluster.url))

    async def run() -> None:
        try:
            with pytest.raises(ValueError, match="app"):
                await amigrate_legacy_items(store)
            assert await store.aget((other, "memories", "fay"), "name") is None
            report = await amigrate_legacy_items(store, app=other)
            assert (report.migrated, report.unmapped) == (1, 0)
            item = await store.aget((other, "memories", "fay"), "name")
            assert item is not None and item.value == {"data": "Fay is a pilot"}
            assert (await amigrate_legacy_items(store, app=other)).migrated == 0
        finally:
            await store.aclose()

    asyncio.run(run())
    assert [e.metadata["value"] for e in mc.read(other, "fay")] == [{"data": "Fay is a pilot"}]
    assert mc.read(other, "memories") == []
    with pytest.raises(RuntimeError, match="sync MemoryClient"):
        migrate_legacy_items(MemclusterStore(aclient=AsyncMemoryClient(memcluster.url)), app=other)
