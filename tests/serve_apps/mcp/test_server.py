"""MCP against the local cluster with the official SDK's client: Streamable HTTP at /mcp on the
ingress, and stdio through `memctl mcp` and the client distribution's bridge (`memcluster-mcp`,
``python -m memclient.integrations.mcp``), subprocesses forwarding to /mcp."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.ray

KEYS = {"app1": "mcp-key-one-0123456789", "app2": "mcp-key-two-0123456789",
        "ro": "mcp-key-ro-0123456789", "off": "mcp-key-off-0123456789"}
POLICIES = {"apps": {"ro": {"tools": {"enabled": {"memory_add": False, "memory_update": False}}},
                     "off": {"memory": "off"}}}
STDIO = {"stdio": ["-m", "cluster.cli", "mcp"], "client": ["-m", "memclient.integrations.mcp"]}
"""How a stdio server is started: ``memctl mcp``, and the client distribution's ``memcluster-mcp``."""
TRANSPORTS = ["http", *STDIO]
ROOT = Path(__file__).resolve().parents[3]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def base(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.serve_apps.protocol_cluster import deployed

    with deployed(serve_port, tmp_path_factory.mktemp("mcp-data"), name="memmcp", prefix="/mcpt", keys=KEYS,
                  memory=POLICIES) as url:
        yield url


def _headers(app: str, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[app]}", "X-Memcluster-User": user}


def _text(result: Any) -> dict[str, Any]:
    return dict(json.loads(result.content[0].text))


def _exposed(base: str, app: str) -> list[str]:
    r = httpx.get(f"{base}/v1/apps/{app}/tools", headers={"Authorization": f"Bearer {KEYS[app]}"}, timeout=30)
    return [t["function"]["name"] for t in r.json()["tools"]]


async def _http_session(base: str, app: str, user: str, body: Any) -> Any:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=_headers(app, user), timeout=60) as http:
        async with streamable_http_client(f"{base}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def _env(key: str) -> dict[str, str]:
    return {"MEMCLUSTER_API_KEY": key, "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp")}


async def _stdio_session(base: str, app: str, user: str, body: Any, how: str = "stdio") -> Any:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=_env(KEYS[app]),
                                   args=[*STDIO[how], "--url", base, "--app", app, "--user", user])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await body(session)


def _session(transport: str) -> Any:
    if transport == "http":
        return _http_session
    return lambda base, app, user, body: _stdio_session(base, app, user, body, transport)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tools_add_then_search_in_a_second_session(base: str, transport: str) -> None:
    run = _session(transport)
    user = f"ann-{transport}"

    async def first(session: Any) -> dict[str, Any]:
        listed = await session.list_tools()
        names = [t.name for t in listed.tools]
        assert names == [*_exposed(base, "app1"), "memory_recall"]
        by_name = {t.name: t for t in listed.tools}
        assert by_name["memory_search"].annotations.read_only_hint is True
        assert by_name["memory_add"].annotations.idempotent_hint is True
        assert by_name["memory_add"].annotations.destructive_hint is False
        assert by_name["memory_add"].input_schema["required"] == ["memory"]
        added = await session.call_tool("memory_add", {"memory": "Ann keeps bees on her roof", "topics": ["hobby"]})
        assert added.is_error is False
        return _text(added)

    added = asyncio.run(run(base, "app1", user, first))

    async def second(session: Any) -> tuple[Any, ...]:
        found = await session.call_tool("memory_search", {"query": "bees roof"})
        bad = await session.call_tool("memory_add", {"memory": "x", "memory_kind": "dream"})
        unknown = await session.call_tool("memory_delete", {"memory_id": added["memory_id"]})
        missing = await session.call_tool("memory_update", {"memory_id": "no-such-id", "memory": "y"})
        return found, bad, unknown, missing

    found, bad, unknown, missing = asyncio.run(run(base, "app1", user, second))
    assert [h["memory_id"] for h in _text(found)["results"]] == [added["memory_id"]]
    # errors raised in the shard actor carry the domain's names (Ray's task-error wrapper is unwrapped)
    assert bad.is_error is True and _text(bad)["field"] == "arguments.memory_kind"
    assert _text(bad)["error"] == "ValidationError"
    assert missing.is_error is True and _text(missing)["error"] == "NotFoundError"
    assert unknown.is_error is True and _text(unknown)["field"] == "name"  # delete is not exposed (agentic)
    assert _text(unknown)["error"] == "PermissionDeniedError"
    # the same memory through the plain HTTP API: MCP wrote into the user's scope of app1 only
    r = httpx.get(f"{base}/v1/apps/app1/users/{user}/memories", headers={"Authorization": f"Bearer {KEYS['app1']}"})
    assert [e["text"] for e in r.json()["entries"]] == ["Ann keeps bees on her roof"]
    r = httpx.get(f"{base}/v1/apps/app2/users/{user}/memories", headers={"Authorization": f"Bearer {KEYS['app2']}"})
    assert r.json()["entries"] == []


def test_recall_and_newest_resource_over_http(base: str) -> None:
    events = [{"id": "e1", "role": "user", "content": "Our cat is called Miso", "timestamp": "2026-01-01T10:00:00Z"}]
    r = httpx.post(f"{base}/v1/apps/app1/users/ben/sessions/s1/events", json={"events": events},
                   headers={"Authorization": f"Bearer {KEYS['app1']}"}, timeout=30)
    assert r.status_code in (200, 202), r.text

    async def body(session: Any) -> tuple[Any, Any, Any]:
        recall = await session.call_tool("memory_recall", {"query": "cat name", "session": "s2"})
        bad = await session.call_tool("memory_recall", {"query": "cat", "max_results": 0})
        newest = await session.read_resource("memories://newest")
        return recall, bad, newest

    recall, bad, newest = asyncio.run(_http_session(base, "app1", "ben", body))
    assert [h["content"] for h in _text(recall)["results"]] == ["Our cat is called Miso"]
    assert bad.is_error is True and _text(bad)["field"] == "arguments.max_results"
    assert "memories" in json.loads(newest.contents[0].text)


def test_http_auth_sessions_and_origin(base: str) -> None:
    url = f"{base}/mcp"
    with httpx.Client(timeout=30) as h:
        r = h.post(url, json=INIT, headers=ACCEPT | {"X-Memcluster-User": "cy"})
        assert r.status_code == 401 and r.json()["field"] == "authorization"
        r = h.post(url, json=INIT, headers=ACCEPT | _headers("app2", "cy") | {"X-Memcluster-App": "app1"})
        assert r.status_code == 403 and r.json()["field"] == "app"
        r = h.post(url, json=INIT, headers=ACCEPT | _headers("app1", "bad/user"))
        assert r.status_code == 422 and r.json()["field"] == "X-Memcluster-User"
        r = h.post(url, json=INIT, headers=ACCEPT | _headers("app1", "cy") | {"Origin": "http://evil.example"})
        assert r.status_code == 403 and r.json()["field"] == "origin"
        r = h.post(url, json=INIT, headers=ACCEPT | _headers("app1", "cy"))
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        follow = {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert h.post(url, json=note, headers=ACCEPT | _headers("app1", "cy") | follow).status_code == 202
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        r = h.post(url, json=listing, headers=ACCEPT | _headers("app2", "cy") | follow)
        assert r.status_code == 404  # another key cannot use the session
        r = h.post(url, json=listing, headers=ACCEPT | _headers("app1", "dora") | follow)
        assert r.status_code == 404  # nor another user with the same key
        r = h.post(url, json=listing, headers=ACCEPT | _headers("app1", "cy") | follow)
        assert r.status_code == 200 and "memory_search" in r.text
        assert h.delete(url, headers=_headers("app1", "cy") | follow).status_code == 200


def test_memory_search_min_relevance_over_http(base: str) -> None:
    user = "rel-mcp"

    async def body(session: Any) -> tuple[Any, Any, Any, Any]:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        await session.call_tool("memory_add", {"memory": "Rel keeps bees on her roof"})
        every = await session.call_tool("memory_search", {"query": "bees roof"})
        none = await session.call_tool("memory_search", {"query": "bees roof", "min_relevance": 1.0})
        bad = await session.call_tool("memory_search", {"query": "bees roof", "min_relevance": "very"})
        return listed["memory_search"].input_schema, every, none, bad

    schema, every, none, bad = asyncio.run(_http_session(base, "app1", user, body))
    prop = schema["properties"]["min_relevance"]
    assert (prop["type"], prop["minimum"], prop["maximum"]) == ("number", -1.0, 1.0)
    hits = _text(every)["results"]
    assert len(hits) == 1 and -1.0 <= hits[0]["relevance"] <= 1.0
    assert _text(none)["results"] == []
    assert bad.is_error is True and _text(bad)["field"] == "arguments.min_relevance"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tools_list_follows_the_app_policy_and_calls_name_the_offered_tools(base: str, transport: str) -> None:
    run = _session(transport)

    async def body(session: Any) -> tuple[list[str], Any, Any]:
        names = [t.name for t in (await session.list_tools()).tools]
        add = await session.call_tool("memory_add", {"memory": "Ro likes figs"})
        unknown = await session.call_tool("memory_fly", {})
        return names, add, unknown

    names, _, unknown = asyncio.run(run(base, "app1", "pol", body))
    assert names == [*_exposed(base, "app1"), "memory_recall"]
    assert unknown.is_error is True
    assert (_text(unknown)["error"], _text(unknown)["field"]) == ("ValidationError", "name")
    assert _text(unknown)["message"].endswith("this app offers " + ", ".join(names))  # memory_recall included

    names, add, _ = asyncio.run(run(base, "ro", "pol", body))
    assert names == ["memory_search", "memory_load", "memory_recall"]  # add and update disabled for the app
    assert add.is_error is True and _text(add)["error"] == "PermissionDeniedError"
    assert "this app offers memory_search, memory_load, memory_recall" in _text(add)["message"]

    names, add, _ = asyncio.run(run(base, "off", "pol", body))
    assert names == []  # memory: off offers nothing
    assert add.is_error is True and _text(add)["error"] == "PermissionDeniedError"
    assert "offers no tools" in _text(add)["message"]


@pytest.mark.parametrize("how", list(STDIO))
def test_stdio_server_with_a_wrong_key_or_no_service_fails_at_start(base: str, how: str) -> None:
    def start(url: str, key: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *STDIO[how], "--url", url, "--app", "app1", "--user", "u"],
                              env=_env(key), cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=120)

    wrong = start(base, "not-a-key-0123456789")
    assert wrong.returncode == 1, wrong.stderr
    assert f"memcluster at {base}" in wrong.stderr and "API key" in wrong.stderr and "was refused" in wrong.stderr
    assert wrong.stdout == ""  # stdout is the MCP channel
    gone = start("http://127.0.0.1:9", KEYS["app1"])
    assert gone.returncode == 1, gone.stderr
    assert "memcluster at http://127.0.0.1:9" in gone.stderr and "not reachable" in gone.stderr
