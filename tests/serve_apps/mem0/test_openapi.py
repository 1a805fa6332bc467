"""The Mem0-compatible routes in /openapi.json, under their own tag; MCP stays outside the document."""

from __future__ import annotations

import httpx


def test_mem0_routes_are_documented_under_their_tag(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    mem0 = {p: set(ops) for p, ops in spec["paths"].items() if p.startswith("/mem0/")}
    assert mem0 == {
        "/mem0/v1/ping/": {"get"},
        "/mem0/v3/memories/add/": {"post"},
        "/mem0/v3/memories/search/": {"post"},
        "/mem0/v3/memories/": {"post"},
        "/mem0/v1/memories/{memory_id}/": {"get", "put", "delete"},
        "/mem0/v1/memories/": {"delete", "post"},  # post: add, the mem0ai 1.x client's route
        "/mem0/v2/memories/search/": {"post"},  # the 1.x client's search and list
        "/mem0/v2/memories/": {"post"},
        "/mem0/v1/memories/{memory_id}/history/": {"get"},
        "/mem0/v1/entities/": {"get"},
        "/mem0/v2/entities/{entity_type}/{name}/": {"delete"},
        "/mem0/v1/batch/": {"put", "delete"},
        "/mem0/v1/feedback/": {"post"},
    }
    for path, ops in mem0.items():
        for op in ops:
            assert spec["paths"][path][op]["tags"] == ["mem0"]
    assert "mem0" in {t["name"] for t in spec["tags"]}
    assert "/mcp" not in spec["paths"]


def test_unsupported_features_are_501_naming_them(client: httpx.Client) -> None:
    r = client.get("/mem0/api/v1/webhooks/projects/p1/")
    assert r.status_code == 501 and "webhooks" in r.json()["message"]
    r = client.post("/mem0/v2/profiles/jobs/", json={})
    assert r.status_code == 501 and "profiles" in r.json()["message"]
