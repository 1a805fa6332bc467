"""The caller's ``key`` on a memory over HTTP and memclient: the same key replaces the item, the key is
scoped per user, bad keys are a 422 naming ``key``, and a keyed memory keeps its metadata filterable."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memclient import InvalidRequest, MemoryClient, NotFound
from memcore.fields import MAX_ITEM_KEY_CHARS


def test_same_key_replaces_the_item(make_server: Any) -> None:
    served = make_server()
    with MemoryClient(served.url) as mc:
        first = mc.add("app", "alice", "Alice likes green tea.", key="prefs/drink", metadata={"ns": "prefs"})
        assert first.key == "prefs/drink"
        second = mc.add("app", "alice", "Alice now prefers black coffee.", key="prefs/drink",
                        metadata={"ns": "prefs", "v": 2})
        assert second.id == first.id and second.created_at == first.created_at
        entries = mc.read("app", "alice")
        assert [(e.text, e.key, e.metadata) for e in entries] == [
            ("Alice now prefers black coffee.", "prefs/drink", {"ns": "prefs", "v": 2})]
        hits = mc.search("app", "alice", "coffee", metadata_filter={"ns": "prefs"})
        assert [h.entry.id for h in hits] == [first.id]
        assert mc.get("app", "alice", first.id).text == "Alice now prefers black coffee."
        # the same text without a key is another memory (content-addressed), the keyed one stays
        plain = mc.add("app", "alice", "Alice now prefers black coffee.")
        assert plain.id != first.id and plain.key is None
        # the key is scoped per user: bob's item under the same key is his own
        bob = mc.add("app", "bob", "Bob likes water.", key="prefs/drink")
        assert bob.id != first.id
        assert [e.text for e in mc.read("app", "bob")] == ["Bob likes water."]
        mc.delete("app", "alice", first.id, hard=True)
        with pytest.raises(NotFound):
            mc.get("app", "alice", first.id)
        again = mc.add("app", "alice", "Alice drinks juice.", key="prefs/drink")
        assert again.id == first.id and again.text == "Alice drinks juice."


def test_update_keeps_the_key_and_the_id(make_server: Any) -> None:
    served = make_server()
    with MemoryClient(served.url) as mc:
        e = mc.add("app", "u", "The build uses make.", key="build")
        u = mc.update("app", "u", e.id, "The build uses ninja.", key="build")
        assert u.id == e.id and u.text == "The build uses ninja." and u.key == "build"


@pytest.mark.parametrize("bad", ["", " lead", "trail ", "a\x00b", "x" * (MAX_ITEM_KEY_CHARS + 1), 7])
def test_bad_keys_are_422_naming_key(make_server: Any, bad: Any) -> None:
    served = make_server()
    with served.client() as http:
        r = http.post("/v1/apps/app/users/u/memories", json={"text": "x", "key": bad})
        assert r.status_code == 422, r.text
        assert "key" in r.text
        assert http.get("/v1/apps/app/users/u/memories").json()["entries"] == []
    with MemoryClient(served.url) as mc, pytest.raises(InvalidRequest) as info:
        mc.add("app", "u", "x", key="trail ")
    assert info.value.field is not None and "key" in info.value.field


def test_every_read_path_returns_the_key(make_server: Any) -> None:
    served = make_server()
    with MemoryClient(served.url) as mc:
        e = mc.add("app", "u", "Carol keeps bees in the garden.", key="hobby")
        assert [h.entry.key for h in mc.search("app", "u", "bees garden")] == ["hobby"]
        assert [x.key for x in mc.read("app", "u")] == ["hobby"]
        assert mc.get("app", "u", e.id).key == "hobby"
        assert [x.key for x in mc.preload("app", "u", budget=5).entries] == ["hobby"]


def test_export_import_keeps_the_key(make_server: Any) -> None:
    served = make_server()
    with MemoryClient(served.url) as mc, served.client() as http:
        e = mc.add("app-x", "u", "Dana runs marathons.", key="sport")
        lines = http.get("/v1/apps/app-x/export").text.splitlines()
        assert [json.loads(line)["key"] for line in lines] == ["sport"]
        other = make_server()
        with MemoryClient(other.url) as mc2, other.client() as http2:
            r = http2.post("/v1/apps/app-x/import", content="\n".join(lines) + "\n",
                           headers={"Content-Type": "application/x-ndjson"})
            assert r.status_code < 300, r.text
            again = mc2.add("app-x", "u", "Dana now swims.", key="sport")
            assert again.id == e.id and [x.text for x in mc2.read("app-x", "u")] == ["Dana now swims."]
