"""Entry metadata over the HTTP API and memclient: stored, returned, filtered (list and search), and
bad metadata or filters are 422 naming ``metadata.<key>`` / ``metadata_filter.<key>``."""

from __future__ import annotations

import json

import httpx

from memclient import InvalidRequest, MemoryClient
from tests.serve_apps.conftest import Served

U = "/v1/apps/meta/users/mia"


def test_metadata_round_trip_and_filters(server: Served, client: httpx.Client) -> None:
    r = client.post(f"{U}/memories", json={"text": "Mia plays the cello", "metadata": {"agent": "a1", "n": 2}})
    assert r.status_code == 201, r.text
    assert r.json()["metadata"] == {"agent": "a1", "n": 2}
    client.post(f"{U}/memories", json={"text": "Mia plays the piano", "metadata": {"agent": "a2"}})
    client.post(f"{U}/memories", json={"text": "Mia plays chess"})
    listed = client.get(f"{U}/memories", params={"metadata_filter": json.dumps({"agent": "a1"})}).json()["entries"]
    assert [e["text"] for e in listed] == ["Mia plays the cello"]
    hits = client.post(f"{U}/memories/search", json={"query": "Mia plays", "metadata_filter": {"agent": "a2"}})
    assert [h["entry"]["text"] for h in hits.json()["hits"]] == ["Mia plays the piano"]
    with MemoryClient(server.url) as mc:
        e = mc.add("meta", "mia", "Mia sings in a choir", metadata={"agent": "a1", "tags": ["x"]})
        assert e.metadata == {"agent": "a1", "tags": ["x"]}
        assert {x.text for x in mc.read("meta", "mia", metadata_filter={"agent": "a1"})} == {
            "Mia plays the cello", "Mia sings in a choir"}
        hits = mc.search("meta", "mia", "choir", metadata_filter={"agent": "a1"})
        assert hits[0].entry.text == "Mia sings in a choir" and {h.entry.metadata["agent"] for h in hits} == {"a1"}
        assert {h.entry.text for h in mc.search("meta", "mia", "choir", metadata_filter={"agent": "a2"})} == {
            "Mia plays the piano"}
        updated = mc.update("meta", "mia", e.id, "Mia sings in a choir", metadata={"agent": "a3"})
        assert updated.id == e.id and updated.metadata == {"agent": "a3"}  # metadata is not part of the id


def test_bad_metadata_and_filters_name_the_field(server: Served, client: httpx.Client) -> None:
    r = client.post(f"{U}/memories", json={"text": "t", "metadata": {"a.b": 1}})
    assert r.status_code == 422 and r.json()["field"] == "metadata.a.b"
    r = client.post(f"{U}/memories", json={"text": "t", "metadata": {"k": "x" * 5000}})
    assert r.status_code == 422 and r.json()["field"] == "metadata.k"
    r = client.post(f"{U}/memories/search", json={"query": "t", "metadata_filter": {"k": [1]}})
    assert r.status_code == 422 and r.json()["field"] == "metadata_filter.k"
    r = client.get(f"{U}/memories", params={"metadata_filter": "{not json"})
    assert r.status_code == 422 and r.json()["field"] == "metadata_filter"
    r = client.get(f"{U}/memories", params={"metadata_filter": json.dumps({"k": 1.5})})
    assert r.status_code == 422 and r.json()["field"] == "metadata_filter.k"
    with MemoryClient(server.url) as mc:
        try:
            mc.add("meta", "mia", "t", metadata={"": 1})
        except InvalidRequest as exc:
            assert exc.field == "metadata"
        else:
            raise AssertionError("empty metadata key accepted")
    assert client.get(f"{U}/memories").json()["entries"] == [] or all(
        e["text"] != "t" for e in client.get(f"{U}/memories").json()["entries"])
