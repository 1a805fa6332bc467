"""The client distribution's stdio MCP server (``memcluster-mcp``, :mod:`memclient.integrations.mcp`) with the
official ``mcp`` client: it forwards to a live app's ``/mcp`` (the server in a process of its own,
uvicorn + LocalShardBackend, auth off; a UTF-8 app and user), and once that process is gone a call is a
tool error the model can read, not a transport failure. (The tools over both transports, policy and
start failures: tests/serve_apps/mcp.)"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from memclient import MemoryClient
from tests.integrations.server_process import server_process

ROOT = Path(__file__).resolve().parents[2]
APP, USER = "caf\u00e9", "z\u00fc"


def _text(result: Any) -> dict[str, Any]:
    return dict(json.loads(result.content[0].text))


def test_bridge_forwards_then_a_vanished_service_is_a_tool_error(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    with ExitStack() as service:
        url = service.enter_context(server_process(sys.executable, tmp_path, ROOT))

        async def body() -> tuple[list[str], Any, Any, list[str], Any]:
            env = {"PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/tmp"), "MEMCLUSTER_URL": url}
            params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env,
                                           args=["-m", "memclient.integrations.mcp", "--app", APP, "--user", USER])
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                added = await session.call_tool("memory_add", {"memory": "Zo\u00eb keeps bees"})
                newest = await session.read_resource("memories://newest")
                with MemoryClient(url, timeout=30) as mc:
                    stored = [e.text for e in mc.read(APP, USER)]
                service.close()  # the service's process ends under a running bridge
                gone = await session.call_tool("memory_search", {"query": "bees"})
                return names, added, newest, stored, gone

        names, added, newest, stored, gone = asyncio.run(body())
    assert names[-1] == "memory_recall" and "memory_add" in names
    assert added.is_error is False and stored == ["Zo\u00eb keeps bees"]  # the UTF-8 app and user
    assert [m["memory"] for m in json.loads(newest.contents[0].text)["memories"]] == ["Zo\u00eb keeps bees"]
    assert gone.is_error is True
    assert _text(gone)["error"] == "Unreachable" and url in _text(gone)["message"]
