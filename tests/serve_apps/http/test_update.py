"""PATCH over real HTTP (uvicorn + LocalShardBackend): every field alone changes only itself (a topics-
or metadata-only change keeps the id, a content change rotates it and carries the rest over), and
datetimes that overflow once converted to UTC are 422 naming the field, in every place they enter."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

BASE = "/v1/apps/upd/users/{user}"
EPISODE = {"text": "Alice moved to Lisbon", "topics": ["home"], "kind": "episode",
           "event_time": "2024-03-01T18:00:00Z", "participants": ["Alice", "Bob"], "location": "Lisbon",
           "metadata": {"source": "chat"}}
FIELDS = ("text", "topics", "kind", "event_time", "participants", "location", "metadata")
CHANGES = [("text", "Alice moved to Porto"), ("topics", ["home", "moves"]), ("kind", "fact"),
           ("event_time", "2024-04-01T00:00:00Z"), ("participants", ["Alice"]), ("location", "Porto"),
           ("metadata", {"source": "email"})]


@pytest.mark.parametrize(("field", "value"), CHANGES)
def test_patch_of_one_field_keeps_the_others(client: httpx.Client, field: str, value: Any) -> None:
    base = BASE.format(user=f"patch-{field}")
    before = client.post(f"{base}/memories", json=EPISODE).json()
    r = client.patch(f"{base}/memories/{before['id']}", json={field: value})
    assert r.status_code == 200, r.text
    after = r.json()
    assert {f: after[f] for f in FIELDS} == {**{f: before[f] for f in FIELDS}, field: value}
    assert (after["id"] == before["id"]) == (field in ("topics", "metadata"))
    assert after["created_at"] == before["created_at"]
    listed = client.get(f"{base}/memories").json()["entries"]
    assert [e["id"] for e in listed] == [after["id"]]


def test_an_empty_patch_is_422(client: httpx.Client) -> None:
    base = BASE.format(user="patch-empty")
    before = client.post(f"{base}/memories", json=EPISODE).json()
    r = client.patch(f"{base}/memories/{before['id']}", json={})
    assert r.status_code == 422 and "nothing to update" in r.json()["message"]


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-14:00"])
def test_overflowing_datetimes_are_422_not_503(client: httpx.Client, stamp: str) -> None:
    base = BASE.format(user="overflow")
    cases = [
        ("POST", f"{base}/memories/search", {"query": "x", "time_from": stamp}, "time_from"),
        ("POST", f"{base}/memories/search", {"query": "x", "time_to": stamp}, "time_to"),
        ("POST", f"{base}/memories", {"text": "x", "event_time": stamp}, "event_time"),
        ("POST", f"{base}/sessions/s1/events", {"events": [{"role": "user", "content": "x", "timestamp": stamp}]},
         "events.0.timestamp"),
        ("POST", f"{base}/tools/memory_add", {"arguments": {"memory": "x", "event_time": stamp}},
         "arguments.event_time"),
    ]
    for method, url, body, field in cases:
        r = client.request(method, url, json=body)
        assert r.status_code == 422, (url, r.text)
        assert r.json()["field"] == field, (url, r.json())


def test_patch_of_the_expiry_keeps_the_id(client: httpx.Client) -> None:
    from datetime import datetime, timedelta

    base = BASE.format(user="patch-expiry")
    before = client.post(f"{base}/memories", json={**EPISODE, "ttl_s": 60}).json()
    assert before["expires_at"] is not None
    r = client.patch(f"{base}/memories/{before['id']}", json={"ttl_s": 7200})
    assert r.status_code == 200, r.text
    renewed = r.json()
    assert renewed["id"] == before["id"] and {f: renewed[f] for f in FIELDS} == {f: before[f] for f in FIELDS}
    lifetime = datetime.fromisoformat(renewed["expires_at"]) - datetime.fromisoformat(renewed["updated_at"])
    assert lifetime == timedelta(seconds=7200)
    at = "2099-06-30T12:00:00Z"
    moved = client.patch(f"{base}/memories/{before['id']}", json={"expires_at": at}).json()
    assert moved["id"] == before["id"]
    assert datetime.fromisoformat(moved["expires_at"]) == datetime.fromisoformat(at)
    forever = client.patch(f"{base}/memories/{before['id']}", json={"expires_at": None}).json()
    assert forever["id"] == before["id"] and forever["expires_at"] is None
    topics = client.patch(f"{base}/memories/{before['id']}", json={"topics": ["x"]}).json()
    assert topics["expires_at"] is None
    assert client.get(f"{base}/memories/{before['id']}").json()["expires_at"] is None


@pytest.mark.parametrize(("body", "field"), [
    ({"ttl_s": None}, "ttl_s"), ({"ttl_s": 0}, "ttl_s"), ({"ttl_s": "soon"}, "ttl_s"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"), ({"expires_at": "next week"}, "expires_at"),
    ({"ttl_s": 5, "expires_at": "2099-01-01T00:00:00Z"}, "expires_at"),
])
def test_a_bad_expiry_patch_is_422_naming_the_field(client: httpx.Client, body: dict[str, Any], field: str) -> None:
    base = BASE.format(user="patch-bad-expiry")
    before = client.post(f"{base}/memories", json={"text": "Alice's locker is 17", "ttl_s": 600}).json()
    r = client.patch(f"{base}/memories/{before['id']}", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert client.get(f"{base}/memories/{before['id']}").json() == before


def test_add_with_expires_at(client: httpx.Client) -> None:
    from datetime import datetime

    base = BASE.format(user="add-expires-at")
    r = client.post(f"{base}/memories", json={"text": "Alice's visa ends", "expires_at": "2099-02-01T00:00:00Z"})
    assert r.status_code == 201, r.text
    assert datetime.fromisoformat(r.json()["expires_at"]) == datetime.fromisoformat("2099-02-01T00:00:00+00:00")
    for body in ({"text": "x", "expires_at": "2001-01-01T00:00:00Z"},
                 {"text": "x", "ttl_s": 5, "expires_at": "2099-01-01T00:00:00Z"}):
        bad = client.post(f"{base}/memories", json=body)
        assert bad.status_code == 422 and bad.json()["field"] == "expires_at", bad.text
    assert [e["text"] for e in client.get(f"{base}/memories").json()["entries"]] == ["Alice's visa ends"]
