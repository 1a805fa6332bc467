"""MCP's ``X-Memcluster-User`` / ``X-Memcluster-App`` are UTF-8: the real ``mcp`` client over HTTP against the
live app (uvicorn + LocalShardBackend) stores ``café-…`` as ``café-…``, REST sees it, erasing it removes it;
bytes that are not UTF-8 are 422 naming the header."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memclient import MemoryClient
from tests.live_server import raw_request
from tests.serve_apps.conftest import Served, serve_local

APP, USER = "caf\u00e9-app", "caf\u00e9-\u00fcser"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(Path(tmp_path_factory.mktemp("mcp-headers")), hashing_embedder) as served:
        yield served


async def _add(url: str, app: str, user: str, text: str) -> dict[str, Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"X-Memcluster-App": app.encode("utf-8"), "X-Memcluster-User": user.encode("utf-8")}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(f"{url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("memory_add", {"memory": text})
                assert result.is_error is False, result
                return dict(json.loads(result.content[0].text))


def test_utf8_headers_name_the_same_user_as_rest(live: Served) -> None:
    added = asyncio.run(_add(live.url, APP, USER, "Zoë grows basil on the balcony"))
    with MemoryClient(live.url, timeout=30) as mc:
        entries = mc.read(APP, USER)
        assert [(e.id, e.app, e.user) for e in entries] == [(added["memory_id"], APP, USER)]
        latin1 = USER.encode("utf-8").decode("latin-1")  # how the header used to be read
        assert mc.read(APP, latin1) == [] and mc.read(APP.encode("utf-8").decode("latin-1"), USER) == []
        assert mc.forget(APP, USER)["entries"] == 1
        assert mc.read(APP, USER) == []


@pytest.mark.parametrize("header", ["X-Memcluster-User", "X-Memcluster-App"])
def test_bytes_that_are_not_utf8_are_refused_naming_the_header(live: Served, header: str) -> None:
    good = {"X-Memcluster-App": "demo", "X-Memcluster-User": "erin"}
    headers = {**good, header: "caf\u00e9"}  # raw_request writes Latin-1: the byte 0xE9 alone, not UTF-8
    status, body = raw_request(live.url, "POST", "/mcp", json.dumps(INIT).encode(),
                               {"Accept": "application/json, text/event-stream", **headers})
    assert (status, body["field"]) == (422, header), body
    assert "UTF-8" in body["message"]
