"""Mem0's graph ``relations`` in search results (``enable_graph``) from memcluster's knowledge graph, over
real HTTP against the live app: the current facts of the entities the query names, absent unless asked."""

from __future__ import annotations

from collections.abc import Callable

from tests.serve_apps.conftest import Served

APP, KEY = "rel", "mem0-relations-key-0123456789"


def test_relations_come_back_only_when_the_client_asks(make_server: Callable[..., Served]) -> None:
    with make_server(shards=1, api_keys={APP: KEY}).client(headers={"Authorization": f"Token {KEY}"}) as c:
        rest = {"Authorization": f"Bearer {KEY}"}
        base = f"/v1/apps/{APP}/users/alice"
        assert c.post(f"{base}/memories", json={"text": "Alice loves hiking"}, headers=rest).status_code == 201
        for obj, supersede in (("Paris", False), ("Lisbon", True)):
            r = c.post(f"{base}/graph/facts", headers=rest,
                       json={"subject": "Alice", "predicate": "lives_in", "object": obj, "supersede": supersede})
            assert r.status_code == 201, r.text
        query = {"query": "what does alice love", "filters": {"user_id": "alice"}}
        plain = c.post("/mem0/v3/memories/search/", json=query)
        assert plain.status_code == 200 and "relations" not in plain.json() and plain.json()["results"]
        graph = c.post("/mem0/v3/memories/search/", json={**query, "enable_graph": True}).json()
        assert graph["relations"] == [{"source": "Alice", "relationship": "lives_in", "destination": "Lisbon"}]
        other = c.post("/mem0/v3/memories/search/", json={**query, "filters": {"user_id": "bob"},
                                                          "enable_graph": True}).json()
        assert other["relations"] == []
