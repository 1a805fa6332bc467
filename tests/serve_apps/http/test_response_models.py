"""Every JSON route's real answer is an instance of its declared ``response_model``.

The routes answer with ready-made responses (bytes for search, the shard's JSON), so FastAPI does
not apply ``response_model``; this test is what keeps the OpenAPI schema true: one request per
JSON route, each 2xx body validated against the schema the OpenAPI document gives it (with
undocumented keys rejected).
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import jsonschema

from tests.serve_apps.conftest import Served

A = "/v1/apps/shapes/users/u1"
MEM0_PREFIX = "/mem0/"


def _closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever properties are listed and nothing is said
    about others, so an undocumented field in an answer fails."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _validators(served: Served) -> dict[tuple[str, str], jsonschema.Draft202012Validator]:
    """(method, path) → a validator of the documented 2xx JSON answer of that operation."""
    doc = served.app.openapi()
    components = _closed(copy.deepcopy(doc.get("components", {})))
    out = {}
    for path, ops in doc["paths"].items():
        if path.startswith(MEM0_PREFIX):  # Mem0's own shapes: the real mem0ai client parses them (mem0/test_api.py)
            continue
        for method, op in ops.items():
            for status, response in op.get("responses", {}).items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if str(status).startswith("2") and schema is not None:
                    root = {**_closed(schema), "components": components}
                    out[(method.upper(), path)] = jsonschema.Draft202012Validator(root)
                    break
    return out


def test_every_json_route_answers_its_response_model(server: Served) -> None:
    validators = _validators(server)
    with server.client() as c:
        added = c.post(f"{A}/memories", json={"text": "Alice lives in Lisbon", "topics": ["home"], "ttl_s": 3600})
        mid = added.json()["id"]
        job = c.post(f"{A}/sessions/s1/events", json={"events": [
            {"id": "e1", "role": "user", "content": "I moved to Porto", "timestamp": "2025-01-01T10:00:00Z"},
            {"id": "e2", "role": "assistant", "content": "Noted", "timestamp": "2025-01-01T10:00:05Z"}]})
        answers: dict[tuple[str, str], httpx.Response] = {
            ("POST", "/v1/apps/{app}/users/{user}/memories"): added,
            ("GET", "/v1/apps/{app}/users/{user}/memories"): c.get(f"{A}/memories"),
            ("GET", "/v1/apps/{app}/users/{user}/memories/{memory_id}"): c.get(f"{A}/memories/{mid}"),
            ("PATCH", "/v1/apps/{app}/users/{user}/memories/{memory_id}"):
                c.patch(f"{A}/memories/{mid}", json={"text": "Alice lives in Lisbon", "topics": ["city"]}),
            ("POST", "/v1/apps/{app}/users/{user}/memories/search"):
                c.post(f"{A}/memories/search", json={"query": "where does Alice live"}),
            ("POST", "/v1/apps/{app}/users/{user}/preload"):
                c.post(f"{A}/preload", json={"budget": 2, "message": "hi"}),
            ("GET", "/v1/apps/{app}/tools"): c.get("/v1/apps/shapes/tools"),
            ("POST", "/v1/apps/{app}/users/{user}/tools/{name}"):
                c.post(f"{A}/tools/memory_search", json={"arguments": {"query": "Lisbon"}}),
            ("POST", "/v1/apps/{app}/users/{user}/sessions/{session}/events"): job,
            ("GET", "/v1/jobs/{job_id}"): c.get(f"/v1/jobs/{job.json()['job_id']}"),
            ("POST", "/v1/apps/{app}/users/{user}/sessions/recall"):
                c.post(f"{A}/sessions/recall", json={"query": "Porto", "session": "other"}),
            ("DELETE", "/v1/apps/{app}/users/{user}/sessions/{session}/events/{event_id}"):
                c.delete(f"{A}/sessions/s1/events/e1"),
            ("DELETE", "/v1/apps/{app}/users/{user}/sessions/{session}"): c.delete(f"{A}/sessions/s1"),
            ("DELETE", "/v1/apps/{app}/users/{user}"): c.delete("/v1/apps/shapes/users/gone"),
            ("POST", "/v1/admin/compact"): c.post("/v1/admin/compact"),
            ("GET", "/healthz"): c.get("/healthz"),
            ("GET", "/readyz"): c.get("/readyz"),
        }
        fact = c.post(f"{A}/graph/facts", json={"subject": "Alice", "predicate": "lives_in", "object": "Lisbon"})
        answers[("POST", "/v1/apps/{app}/users/{user}/graph/facts")] = fact
        g = "/v1/apps/{app}/users/{user}"
        answers.update({
            ("GET", f"{g}/graph/facts"): c.get(f"{A}/graph/facts", params={"entity": "alice"}),
            ("GET", f"{g}/graph/timeline"): c.get(f"{A}/graph/timeline", params={"entity": "Alice"}),
            ("GET", f"{g}/graph/neighbourhood"): c.get(f"{A}/graph/neighbourhood", params={"entity": "Alice"}),
            ("PUT", f"{g}/graph/entities"): c.put(f"{A}/graph/entities", json={"name": "Alice", "type": "person"}),
            ("GET", f"{g}/graph/entities/{{name}}"): c.get(f"{A}/graph/entities/alice"),
            ("POST", f"{g}/diary"): c.post(f"{A}/diary", json={"text": "checked the calendar"}),
            ("GET", f"{g}/diary"): c.get(f"{A}/diary"),
            ("POST", f"{g}/graph/facts/invalidate"): c.post(f"{A}/graph/facts/invalidate", json={
                "subject": "Alice", "predicate": "lives_in", "object": "Lisbon"}),
        })
        answers[("DELETE", f"{g}/graph/facts/{{fact_id}}")] = c.delete(
            f"{A}/graph/facts/{fact.json()['fact']['fact_id']}")
        exported = c.get("/v1/apps/shapes/export")
        answers[("POST", "/v1/apps/{app}/import")] = c.post(
            "/v1/apps/shapes/import", content=exported.content, headers={"Content-Type": "application/x-ndjson"})
        graph = c.get("/v1/apps/shapes/graph/export")
        answers[("POST", "/v1/apps/{app}/graph/import")] = c.post(
            "/v1/apps/shapes/graph/import", content=graph.content, headers={"Content-Type": "application/x-ndjson"})
    assert set(answers) == set(validators), "a JSON route without a conformance request (or a stale one)"
    for route, response in answers.items():
        assert response.status_code < 300, (route, response.status_code, response.text)
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validators[route].iter_errors(response.json())]
        assert errors == [], route
