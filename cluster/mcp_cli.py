"""``memctl mcp``: an MCP server over stdio that forwards to a running memcluster through memclient.

    memctl mcp --app APP --user USER [--url URL]        (key: $MEMCLUSTER_API_KEY)

This is how a desktop MCP client starts it (README, "MCP"). The tools are the ones the service
exposes for the app (``GET /v1/apps/{app}/tools``, the app's mode decided by the server) plus
``memory_recall``; calls go to ``POST .../tools/{name}`` and ``.../sessions/recall``. Errors of the
service come back as MCP tool errors naming the field. Nothing but MCP messages is written to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from cluster.backup import URL_HELP, api_key, base_url
from memclient import AsyncMemoryClient
from memcore.errors import MemoryServiceError, ValidationError
from memcore.tools import RESOURCE_FIELDS, entry_json
from memcore.validation import make_key


class MemclientToolBackend:
    """:class:`serve_apps.mcp.server.ToolBackend` over :class:`memclient.AsyncMemoryClient`."""

    def __init__(self, client: AsyncMemoryClient, app: str, user: str) -> None:
        self.client, self.app, self.user = client, app, user

    async def exposed(self) -> list[dict[str, Any]]:
        return await self.client.tools(self.app, mode=None)

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        names = [s["function"]["name"] for s in await self.exposed()]
        if name not in names:
            raise ValidationError(f"unknown tool {name!r}; this app exposes {', '.join(names)}", field="name")
        return await self.client.call_tool(self.app, self.user, name, arguments, mode=None)

    async def recall(self, query: str, session: str | None, max_results: int) -> list[dict[str, Any]]:
        body = await self.client.recall(self.app, self.user, query, session=session, max_results=max_results)
        return list(body.get("hits", []))

    async def newest(self, limit: int) -> list[dict[str, Any]]:
        return [entry_json(e, RESOURCE_FIELDS) for e in await self.client.read(self.app, self.user, limit)]


async def serve_stdio(url: str, key: str | None, app: str, user: str) -> None:
    from mcp.server.stdio import stdio_server

    from serve_apps.mcp.server import build_server

    async with AsyncMemoryClient(url, api_key=key, timeout=60.0) as client:
        backend = MemclientToolBackend(client, app, user)

        async def resolve(_ctx: Any) -> MemclientToolBackend:
            return backend

        server = build_server(resolve)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def cmd_mcp(args: argparse.Namespace, state: Callable[[], dict[str, Any] | None]) -> int:
    try:
        make_key(args.app, args.user)  # a bad app or user id fails before anything starts
    except MemoryServiceError as exc:
        raise ValueError(f"{exc.field}: {exc}") from None
    url = base_url(args.url, state())
    asyncio.run(serve_stdio(url, api_key(None), args.app, args.user))
    return 0


def add_parsers(sub: Any, state: Callable[[], dict[str, Any] | None]) -> None:
    """Register ``mcp`` on memctl's subparsers."""
    p = sub.add_parser("mcp", help="run an MCP server on stdio for one app and user (for desktop MCP clients)")
    p.add_argument("--url", default=None, help=URL_HELP)
    p.add_argument("--app", required=True, help="the app (its key: $MEMCLUSTER_API_KEY)")
    p.add_argument("--user", required=True, help="the user whose memories the tools read and write")
    p.set_defaults(func=lambda a: cmd_mcp(a, state))
