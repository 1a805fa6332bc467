"""The MCP server of memcluster (official ``mcp`` SDK, low-level ``Server``), transport-independent.

Tools: what the app offers an MCP client (:func:`memcore.tools.offered_schemas`: its exposed memory
tools in its mode, the set of ``GET /v1/apps/{app}/tools``, then :data:`memcore.vocabulary.RECALL` over
the raw session archive; none when the app's memory is off) with their JSON schemas. ``tools/call``
runs only a name of that same list: another is a tool error naming every offered tool
(``PermissionDeniedError`` for a memory tool the app does not offer, ``ValidationError`` for an unknown
name). Annotations: ``readOnlyHint`` for search, load and recall; ``destructiveHint`` for delete and
clear; ``idempotentHint`` for add. A failing call (bad argument, refused tool, unknown id) is an
MCP tool error (``isError``) whose text is ``{"error", "field", "message"}``, never a transport
failure. Resource :data:`NEWEST_URI` lists the user's newest memories.

Who the caller is (app, user) and how calls reach the shards is a :class:`ToolBackend`
(:mod:`serve_apps.mcp.http`, Streamable HTTP on the ingress). The stdio servers (``memctl mcp`` and
the client distribution's ``memcluster-mcp``, :mod:`memclient.integrations.mcp`) bridge stdio to this
endpoint, so this module is the only home of MCP's tool logic.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from memcore import vocabulary as T
from memcore.errors import MemoryServiceError, PermissionDeniedError, ValidationError
from memcore.tools import RESOURCE_FIELDS, entry_json, recall_args

NEWEST_URI = "memories://newest"
NEWEST_LIMIT = 20
_READ_ONLY = {T.SEARCH, T.LOAD, T.RECALL, *T.GRAPH_READ_TOOLS}
_DESTRUCTIVE = {T.DELETE, T.CLEAR}
_IDEMPOTENT = {T.ADD, T.KG_ADD, T.KG_INVALIDATE}


class ToolBackend(Protocol):
    """One caller's view of the service (its app and user are fixed)."""

    async def offered(self) -> list[dict[str, Any]]:
        """What the app offers an MCP client as OpenAI function schemas (:func:`memcore.tools.offered_schemas`)."""
        ...

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run a memory tool; raises an error with ``field`` on bad input."""
        ...

    async def recall(self, query: str, session: str | None, max_results: int) -> list[dict[str, Any]]:
        ...

    async def newest(self, limit: int) -> list[dict[str, Any]]:
        """The user's newest memories as JSON objects."""
        ...


Resolve = Callable[[ServerRequestContext[Any, Any]], Awaitable[ToolBackend]]


def tool_annotations(name: str) -> types.ToolAnnotations:
    return types.ToolAnnotations(read_only_hint=name in _READ_ONLY, destructive_hint=name in _DESTRUCTIVE,
                                 idempotent_hint=name in _IDEMPOTENT or name in _READ_ONLY, open_world_hint=False)


def tool_of(schema: dict[str, Any]) -> types.Tool:
    """An MCP tool from an OpenAI function schema (the same parameters object)."""
    fn = schema["function"]
    return types.Tool(name=fn["name"], description=fn["description"], input_schema=fn["parameters"],
                      annotations=tool_annotations(fn["name"]))


def not_offered(name: str, offered: list[str]) -> MemoryServiceError:
    """The refusal of a ``tools/call`` whose name ``tools/list`` did not offer; it names every offered tool."""
    listing = f"this app offers {', '.join(offered)}" if offered else "this app offers no tools (memory is off)"
    if name in T.ALL_TOOLS or name == T.RECALL:
        return PermissionDeniedError(f"tool {name} is not offered to this app (its tool mode and memory policy); "
                                     f"{listing}", field="name")
    return ValidationError(f"unknown tool {name!r}; {listing}", field="name")


def tool_error(exc: BaseException) -> types.CallToolResult:
    """An MCP tool error naming the field (the HTTP API's error shape as text and structured content)."""
    body = {"error": str(getattr(exc, "error", None) or type(exc).__name__), "field": getattr(exc, "field", None),
            "message": str(getattr(exc, "message", None) or exc)}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body,
                                is_error=True)


def _ok(result: Any) -> types.CallToolResult:
    data = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(data, ensure_ascii=False))],
                                structured_content=data)


def build_server(resolve: Resolve, *, name: str = "memcluster", version: str = "0.1.0") -> Server[Any]:
    """The MCP server; ``resolve`` gives each request its caller's :class:`ToolBackend`."""

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        backend = await resolve(ctx)
        return types.ListToolsResult(tools=[tool_of(s) for s in await backend.offered()])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            backend = await resolve(ctx)
            offered = [s["function"]["name"] for s in await backend.offered()]
            if params.name not in offered:
                raise not_offered(params.name, offered)
            if params.name == T.RECALL:
                hits = await backend.recall(*recall_args(arguments))
                return _ok({"results": hits, "count": len(hits)})
            return _ok(await backend.run_tool(params.name, arguments))
        except Exception as exc:  # noqa: BLE001 - every failure is a tool error, never a transport one
            return tool_error(exc)

    async def list_resources(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(
            uri=NEWEST_URI, name="newest memories", mime_type="application/json",
            description=f"The user's {NEWEST_LIMIT} most recently written memories.")])

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != NEWEST_URI:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown resource {params.uri}")
        backend = await resolve(ctx)
        entries = await backend.newest(NEWEST_LIMIT)
        text = json.dumps({"memories": entries}, ensure_ascii=False)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=NEWEST_URI, mime_type="application/json", text=text)])

    return Server(name, version=version, on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_read_resource=read_resource)


def resource_json(entry: Any) -> dict[str, Any]:
    """A memory for the resource (:data:`memcore.tools.RESOURCE_FIELDS`: id, text, kind, topics, metadata,
    updated_at), from an entry or the HTTP API's JSON of one."""
    return entry_json(entry, RESOURCE_FIELDS)
