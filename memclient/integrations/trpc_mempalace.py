"""trpc-agent-py's MemPalace tools on memcluster (``pip install "memcluster-client[trpc]"``): the classes,
tool names and argument shapes of seed 002's ``trpc_agent_sdk.tools.mempalace_tool`` for the diary and the
knowledge graph, so an agent written for them switches by changing its import::

    from memclient.integrations.trpc_mempalace import MempalaceKGAddTool, MempalaceKGQueryTool, ...
    client = AsyncMemoryClient("http://127.0.0.1:8000", api_key="...")
    tools = [MempalaceKGAddTool(client), MempalaceKGQueryTool(client), MempalaceDiaryWriteTool(client), ...]

Each tool runs memcluster's graph tool of the same arguments (``mempalace_kg_add`` → ``memory_kg_add``,
:data:`MEMPALACE_TOOLS`) through ``POST /v1/apps/{app}/users/{user}/tools/{name}``: the app and user come from
the invocation context (the app may be fixed with ``app``), the diary's ``agent_name`` defaults to the calling
agent's name, and the app's tool switches apply (the app must enable the graph tools: ``tools.enabled``).
Results are the server's JSON (MemPalace's shapes: ``{"success", "triple_id", "fact"}``, ``{"entity", "facts",
"count"}``, ``{"agent", "entries", "total", "showing"}``, ...); a failure answers ``{"success": False,
"error"}`` as MemPalace's tools do. MemPalace's drawer tools (search, add_drawer) have memcluster's own
equivalents (:class:`memclient.integrations.trpc.SearchMemoryTool`, ``SaveMemoryTool``).
"""

from __future__ import annotations

from typing import Any

from memclient.integrations.extras import require

require("trpc")

from trpc_agent_sdk.context import InvocationContext  # noqa: E402
from trpc_agent_sdk.tools import BaseTool  # noqa: E402
from trpc_agent_sdk.types import FunctionDeclaration, Schema, Type  # noqa: E402

from memclient import AsyncMemoryClient, MemclientError  # noqa: E402

__all__ = ["MEMPALACE_TOOLS", "MempalaceDiaryReadTool", "MempalaceDiaryWriteTool", "MempalaceKGAddTool",
           "MempalaceKGInvalidateTool", "MempalaceKGQueryTool", "MempalaceKGTimelineTool"]

MEMPALACE_TOOLS: dict[str, str] = {
    "mempalace_diary_write": "memory_diary_write", "mempalace_diary_read": "memory_diary_read",
    "mempalace_kg_add": "memory_kg_add", "mempalace_kg_query": "memory_kg_query",
    "mempalace_kg_timeline": "memory_kg_timeline", "mempalace_kg_invalidate": "memory_kg_invalidate",
}
"""MemPalace tool name → memcluster's graph tool (the server's ``memcore.vocabulary.MEMPALACE_NAMES``; a test
keeps the two equal, this client installs without the server)."""

_STR, _INT, _NUM = Type.STRING, Type.INTEGER, Type.NUMBER
_AGENT = (_STR, "Agent name. Defaults to the current agent when omitted.")
_TRIPLE = {"subject": (_STR, "Subject entity."), "predicate": (_STR, "Relationship type."),
           "object": (_STR, "Object entity.")}
_DECLARATIONS: dict[str, tuple[str, dict[str, tuple[Type, str]], list[str]]] = {
    "mempalace_diary_write": ("Write an agent diary entry into MemPalace.", {
        "agent_name": _AGENT, "entry": (_STR, "Diary entry content."), "topic": (_STR, "Topic tag. Default: general."),
        "wing": (_STR, "Optional wing. Default: wing_<agent_name>.")}, ["entry"]),
    "mempalace_diary_read": ("Read recent MemPalace diary entries for an agent.", {
        "agent_name": _AGENT, "last_n": (_INT, "Number of recent entries. Default: 10."),
        "wing": (_STR, "Optional wing filter.")}, []),
    "mempalace_kg_query": ("Query the MemPalace knowledge graph for an entity's relationships.", {
        "entity": (_STR, "Entity to query."), "as_of": (_STR, "Optional date filter in YYYY-MM-DD."),
        "direction": (_STR, "outgoing, incoming, or both. Default: both.")}, ["entity"]),
    "mempalace_kg_add": ("Add a relationship fact to the MemPalace knowledge graph.", {
        **_TRIPLE, "valid_from": (_STR, "Optional start date in YYYY-MM-DD."),
        "valid_to": (_STR, "Optional end date in YYYY-MM-DD."),
        "confidence": (_NUM, "Optional confidence score 0.0-1.0."),
        "source_file": (_STR, "Optional provenance source file."),
        "source_drawer_id": (_STR, "Optional provenance drawer ID.")}, ["subject", "predicate", "object"]),
    "mempalace_kg_invalidate": ("Mark a MemPalace knowledge graph fact as no longer current.", {
        **_TRIPLE, "ended": (_STR, "Optional end date in YYYY-MM-DD. Default: today.")},
        ["subject", "predicate", "object"]),
    "mempalace_kg_timeline": ("Get chronological MemPalace knowledge graph facts, optionally for one entity.", {
        "entity": (_STR, "Optional entity to filter timeline for.")}, []),
}


class _MemclusterMempalaceTool(BaseTool):
    tool_name = ""

    def __init__(self, client: AsyncMemoryClient, *, app: str | None = None, **kwargs: Any) -> None:
        super().__init__(name=self.tool_name, description=_DECLARATIONS[self.tool_name][0],
                         filters_name=kwargs.pop("filters_name", None), filters=kwargs.pop("filters", None))
        self.client, self.app = client, app

    def _get_declaration(self) -> FunctionDeclaration | None:
        description, props, required = _DECLARATIONS[self.tool_name]
        return FunctionDeclaration(name=self.name, description=description, parameters=Schema(
            type=Type.OBJECT, properties={k: Schema(type=t, description=d) for k, (t, d) in props.items()},
            required=required or None))

    async def _run_async_impl(self, *, tool_context: InvocationContext, args: dict[str, Any]) -> dict[str, Any]:
        arguments = {k: v for k, v in args.items() if v is not None and v != ""}
        if "agent_name" in _DECLARATIONS[self.tool_name][1] and not arguments.get("agent_name"):
            arguments["agent_name"] = tool_context.agent_name
        try:
            return await self.client.call_tool(self.app or tool_context.app_name, tool_context.user_id,
                                               MEMPALACE_TOOLS[self.tool_name], arguments)
        except MemclientError as exc:
            return {"success": False, "error": str(exc)}


class MempalaceDiaryWriteTool(_MemclusterMempalaceTool):
    """``mempalace_diary_write``: an agent diary entry of the user."""

    tool_name = "mempalace_diary_write"


class MempalaceDiaryReadTool(_MemclusterMempalaceTool):
    """``mempalace_diary_read``: the agent's recent diary entries, newest first."""

    tool_name = "mempalace_diary_read"


class MempalaceKGAddTool(_MemclusterMempalaceTool):
    """``mempalace_kg_add``: a fact ``subject -> predicate -> object`` (idempotent)."""

    tool_name = "mempalace_kg_add"


class MempalaceKGQueryTool(_MemclusterMempalaceTool):
    """``mempalace_kg_query``: an entity's facts, optionally as of a date."""

    tool_name = "mempalace_kg_query"


class MempalaceKGInvalidateTool(_MemclusterMempalaceTool):
    """``mempalace_kg_invalidate``: end a current fact, keeping its history."""

    tool_name = "mempalace_kg_invalidate"


class MempalaceKGTimelineTool(_MemclusterMempalaceTool):
    """``mempalace_kg_timeline``: facts in chronological order, optionally of one entity."""

    tool_name = "mempalace_kg_timeline"
