"""The graph and diary tools over MCP (the real ``mcp`` client, Streamable HTTP, against the live app): listed
with their schemas and hints once the app enables them, run in the caller's user scope."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memcore.vocabulary import DIARY_READ, DIARY_WRITE, GRAPH_TOOLS, KG_ADD, KG_QUERY, KG_TIMELINE
from tests.serve_apps.conftest import Served, serve_local


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(Path(tmp_path_factory.mktemp("mcp-graph")), hashing_embedder,
                     tools={"enabled": dict.fromkeys(GRAPH_TOOLS, True)}) as served:
        yield served


async def _session(url: str, user: str, body: Any) -> Any:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"X-Memcluster-App": "app", "X-Memcluster-User": user}, timeout=60) as http:
        async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def _json(result: Any) -> dict[str, Any]:
    return dict(json.loads(result.content[0].text))


def test_graph_tools_are_listed_and_run_per_user(live: Served) -> None:
    async def ann(session: Any) -> tuple[Any, ...]:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(GRAPH_TOOLS) <= set(listed)
        assert listed[KG_QUERY].annotations.read_only_hint is True
        assert listed[KG_ADD].annotations.read_only_hint is False
        assert listed[KG_ADD].input_schema["required"] == ["subject", "predicate", "object"]
        added = await session.call_tool(KG_ADD, {"subject": "Ann", "predicate": "lives_in", "object": "Paris"})
        moved = await session.call_tool(KG_ADD, {"subject": "Ann", "predicate": "lives_in", "object": "Lisbon",
                                                 "supersede": True})
        bad = await session.call_tool(KG_ADD, {"subject": " ", "predicate": "p", "object": "o"})
        query = await session.call_tool(KG_QUERY, {"entity": "ann"})
        line = await session.call_tool(KG_TIMELINE, {"entity": "Ann"})
        await session.call_tool(DIARY_WRITE, {"entry": "Ann moved.", "agent_name": "helper"})
        diary = await session.call_tool(DIARY_READ, {"agent_name": "helper"})
        return added, moved, bad, query, line, diary

    added, moved, bad, query, line, diary = asyncio.run(_session(live.url, "ann", ann))
    assert added.is_error is False and _json(added)["created"] is True
    assert [c["object"] for c in _json(moved)["closed"]] == ["Paris"]
    assert bad.is_error is True and _json(bad)["field"] == "arguments.subject"
    assert [(f["object"], f["current"]) for f in _json(query)["facts"]] == [("Paris", False), ("Lisbon", True)]
    assert _json(line)["count"] == 2
    assert [e["content"] for e in _json(diary)["entries"]] == ["Ann moved."]

    async def bob(session: Any) -> Any:
        return await session.call_tool(KG_QUERY, {"entity": "Ann"})

    assert _json(asyncio.run(_session(live.url, "bob", bob)))["facts"] == []
