"""Ids that a URL would change are refused with 422 naming the field, on every route (raw sockets and
httpx against the live FastAPI app) and in memclient before anything is sent; nothing is touched.
Ids in bodies that later travel in a URL (event ids) follow the same rule, and so does the recall
``session`` filter (the one session rule)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memclient import InvalidRequest, MemoryClient
from tests.live_server import raw_request
from tests.serve_apps.conftest import Served, serve_local

APP = "demo"
#: raw (already percent-encoded) path segments a URL would change; the server decodes each once
BAD = [".", "..", "%2e", "%2E%2e", "%2f", "a%2Fb", "%252e", "%252F", "..%2F..", ""]
VALID = {"app": APP, "user": "alice", "session": "s1", "memory_id": "m1", "event_id": "e1", "job_id": "0-x",
         "name": "memory_add", "entity_type": "user", "fact_id": "f1"}
SLASH_OK = {("/mem0/v2/entities/{entity_type}/{name}/", "name")}
"""Mem0 entity names may hold '/' (trpc-agent-py's app_name/user_id); mem0ai encodes them."""
INVISIBLE = ["\u200b", "\u202e", "\u2060", "\ufeff", "\u00ad"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(Path(tmp_path_factory.mktemp("paths")), hashing_embedder) as served:
        yield served


@pytest.fixture
def mc(live: Served) -> Iterator[MemoryClient]:
    with MemoryClient(live.url, timeout=30) as client:
        yield client


def routes_with_ids(live: Served) -> list[tuple[str, str, str]]:
    """(method, template, parameter) for every path parameter of every documented route."""
    spec = httpx.get(f"{live.url}/openapi.json", timeout=30).json()
    return [(method.upper(), path, name) for path, ops in spec["paths"].items()
            for name in re.findall(r"\{(\w+)\}", path) for method in sorted(ops)[:1]]


def test_every_route_refuses_ids_a_url_would_change(live: Served) -> None:
    cases = routes_with_ids(live)
    assert {name for _, _, name in cases} >= {"app", "user", "session", "memory_id", "event_id", "job_id", "name"}
    for method, template, param in cases:
        for bad in BAD:
            if (template, param) in SLASH_OK and "2F" in bad.upper():
                continue
            target = re.sub(r"\{(\w+)\}", lambda m, p=param, b=bad: b if m.group(1) == p else VALID[m.group(1)],
                            template)
            status, body = raw_request(live.url, method, target, b"{}" if method in ("POST", "PUT", "PATCH") else b"")
            assert status == 422, (method, target, status, body)
            assert body["error"] == "ValidationError" and body["field"] == param, (target, body)
            assert param in body["message"], body


def test_dot_segments_never_reach_another_resource(live: Served, mc: MemoryClient) -> None:
    """The issue's reproductions: '..' as a session erased the user, '.' as a memory id or user cleared
    memories. Now: 422 naming the field from memclient (before sending), raw sockets and httpx."""
    kept = [mc.add(APP, "alice", f"Alice fact {i}").id for i in range(2)]
    mc.add(APP, "bob", "Bob fact")
    for call, field in ((lambda: mc.delete_session(APP, "alice", ".."), "session"),
                        (lambda: mc.delete(APP, "alice", "."), "memory_id"),
                        (lambda: mc.clear(APP, "."), "user"),
                        (lambda: mc.delete_turn(APP, "alice", "s1", ".."), "event_id")):
        with pytest.raises(InvalidRequest) as err:
            call()
        assert err.value.field == field and err.value.status is None
    for target, field in ((f"/v1/apps/{APP}/users/alice/sessions/%2E%2E", "session"),
                          (f"/v1/apps/{APP}/users/alice/sessions/..", "session"),
                          (f"/v1/apps/{APP}/users/alice/memories/.", "memory_id"),
                          (f"/v1/apps/{APP}/users/%2e/memories", "user"),
                          (f"/v1/apps/{APP}/users/alice/sessions/s1/events/%2e%2E", "event_id")):
        status, body = raw_request(live.url, "DELETE", target)
        assert (status, body["field"]) == (422, field), (target, body)
    with live.client() as h:
        for target, field in ((f"/v1/apps/{APP}/users/alice/sessions/a%2Fb", "session"),  # was 404 Not Found
                              (f"/v1/apps/{APP}/users/a%2Fb/memories", "user"),
                              (f"/v1/apps/{APP}/users/alice%2Fmemories/memories", "user"),  # not a memory route
                              (f"/v1/apps/{APP}%2Fusers/alice/memories", "app")):
            r = h.request("GET" if target.endswith("memories") else "DELETE", target)
            assert (r.status_code, r.json()["field"]) == (422, field), (target, r.text)
    assert sorted(e.id for e in mc.read(APP, "alice")) == sorted(kept)
    assert [e.text for e in mc.read(APP, "bob")] == ["Bob fact"]


def test_event_ids_in_bodies_follow_the_url_rule(live: Served, mc: MemoryClient) -> None:
    """An event id travels later in ``DELETE .../sessions/{session}/events/{event_id}``."""
    base = f"/v1/apps/{APP}/users/carol/sessions/s1/events"
    with live.client() as h:
        for bad in ["a/b", ".", "..", "%2e", "%2F"]:
            events = [{"id": "ok", "role": "user", "content": "fine"}, {"id": bad, "role": "user", "content": "x"}]
            r = h.post(base, json={"events": events})
            assert (r.status_code, r.json()["field"]) == (422, "events.1.id"), (bad, r.text)
    assert mc.recall(APP, "carol", "fine")["hits"] == []  # nothing of the batch was archived


@pytest.mark.parametrize("char", INVISIBLE)
def test_the_recall_session_filter_is_the_one_session_rule(live: Served, char: str) -> None:
    session = f"s{char}1"
    with live.client() as h:
        ingest = h.post(f"/v1/apps/{APP}/users/dave/sessions/{session}/events",
                        json={"events": [{"role": "user", "content": "hello"}]})
        recall = h.post(f"/v1/apps/{APP}/users/dave/sessions/recall", json={"query": "hello", "session": session})
        dots = h.post(f"/v1/apps/{APP}/users/dave/sessions/recall", json={"query": "hello", "session": ".."})
    assert (ingest.status_code, ingest.json()["field"]) == (422, "session"), ingest.text
    assert (recall.status_code, recall.json()["field"]) == (422, "session"), recall.text
    assert (dots.status_code, dots.json()["field"]) == (422, "session"), dots.text
