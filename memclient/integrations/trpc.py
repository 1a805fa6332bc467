"""trpc-agent-py on memcluster (``pip install "memcluster-client[trpc]"``)::

    service = MemclusterMemoryService(AsyncMemoryClient("http://127.0.0.1:8000", api_key="..."), enabled=True)
    runner = Runner(app_name="my-app", agent=agent, session_service=InMemorySessionService(),
                    memory_service=service)          # agent tools: [load_memory_tool]

- :class:`MemclusterMemoryService`, the framework's ``BaseMemoryService`` (``MemoryServiceABC``).

  Identity mapping (as seed 002 maps ``save_key``): the framework's memory key is
  ``session.save_key`` = ``"{app_name}/{user_id}"`` (``search_memory`` gets the same ``key``);
  memcluster's app is ``app_name`` (or the ``app`` given to the service, for every trpc app) and
  memcluster's user is ``user_id``; the trpc ``session.id`` is memcluster's session. memcluster ids
  cannot contain ``/``, so the split at the first ``/`` is unambiguous; a ``user_id`` that breaks the URL
  rule (``org/alice``, ``..``: ``memclient.segments``) raises :class:`memclient.InvalidRequest` naming
  ``user`` before anything is sent.

  ``store_session`` sends the session's user and model text events to memcluster's ingest (the whole
  session each time is fine: the server's cursor extracts only the delta); function calls and their
  responses and partial (streamed) events are left out. ``search_memory`` is memcluster's hybrid
  search, as the framework's ``SearchMemoryResponse`` of ``MemoryEntry`` (content, author = the
  memory's source, timestamp = event time or creation time, ISO-8601). Disabled (``enabled`` False,
  the framework's default, or ``MemoryServiceConfig(enabled=False)``): stores nothing, finds nothing.
  TTL: memcluster expires memories by the server's per-app TTL setting (``ttl`` with optional refresh
  on access); the framework's ``MemoryServiceConfig.ttl`` is not sent. ``close`` closes the client.

- :class:`SearchMemoryTool` / :class:`SaveMemoryTool`: the ``search_memory(query)`` and
  ``save_memory(content)`` tools in the style of seed 002's Mem0 tools, the app and user taken from
  the invocation context (never from a tool argument). ``search_memory`` answers
  ``{status: success, memories, user_id}`` or ``{status: no_memories, message, user_id}``;
  ``save_memory`` answers ``{status: success, message, result, user_id}`` or
  ``{status: error, message, user_id}`` (the error names the cause).

Errors of the service raise :class:`memclient.MemclientError` subclasses; a search never turns an error
into "no memories" (through ``load_memory`` the Runner yields it as a ``tool_execution_failed`` event). The
Runner only logs a failed post-turn ``store_session``, so the service also keeps it: ``errors`` maps a
trpc session id to its latest failure (field and message), until a later store of that session succeeds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memclient.integrations.extras import require

require("trpc")

from trpc_agent_sdk.context import AgentContext, InvocationContext  # noqa: E402
from trpc_agent_sdk.memory import BaseMemoryService, MemoryServiceConfig  # noqa: E402
from trpc_agent_sdk.sessions import Session  # noqa: E402
from trpc_agent_sdk.tools import BaseTool  # noqa: E402
from trpc_agent_sdk.types import (  # noqa: E402
    Content,
    FunctionDeclaration,
    MemoryEntry,
    Part,
    Schema,
    SearchMemoryResponse,
    Type,
)

from memclient import AsyncMemoryClient, InvalidRequest, MemclientError, SearchHit  # noqa: E402
from memclient.segments import segment_problem  # noqa: E402

__all__ = ["MemclusterMemoryService", "SaveMemoryTool", "SearchMemoryTool", "events_of", "split_key"]


def split_key(key: str, app: str | None = None) -> tuple[str, str]:
    """``"{app_name}/{user_id}"`` as memcluster's (app, user); ``app`` replaces the app when given. A
    part that cannot be a memcluster id in a URL raises :class:`InvalidRequest` naming ``app`` or ``user``."""
    head, sep, user = key.partition("/")
    if not sep or not head or not user:
        raise ValueError(f"a trpc memory key is 'app_name/user_id'; got {key!r}")
    for field, value in (("app", app or head), ("user", user)):
        problem = segment_problem(value)
        if problem is not None:
            raise InvalidRequest(f"trpc memory key {key!r}: {field} {problem}", error="ValidationError", field=field)
    return (app or head), user


def events_of(session: Session) -> list[dict[str, Any]]:
    """The ingest events of a trpc session: final user/model events with text, oldest first."""
    out: list[dict[str, Any]] = []
    for event in session.events:
        content = event.content
        if event.partial or content is None or not content.parts:
            continue
        if any(p.function_call or p.function_response for p in content.parts):
            continue
        text = "".join(p.text for p in content.parts if p.text and not p.thought).strip()
        if not text:
            continue
        role = "user" if (content.role == "user" or event.author == "user") else "assistant"
        at = datetime.fromtimestamp(event.timestamp, UTC) if event.timestamp else datetime.now(UTC)
        out.append({"id": event.id or f"{session.id}-{len(out)}", "role": role, "content": text,
                    "timestamp": at.isoformat()})
    return out


def _memory_entry(hit: SearchHit) -> MemoryEntry:
    entry = hit.entry
    role = "user" if entry.source == "user" else "model"
    when = entry.event_time or entry.created_at
    return MemoryEntry(content=Content(role=role, parts=[Part(text=entry.text)]), author=entry.source,
                       timestamp=when.isoformat())


class MemclusterMemoryService(BaseMemoryService):
    """The trpc-agent memory service backed by memcluster (mapping and rules: the module docstring)."""

    def __init__(
        self,
        client: AsyncMemoryClient,
        memory_service_config: MemoryServiceConfig | None = None,
        enabled: bool = False,
        *,
        app: str | None = None,
        wait_s: float = 0.0,
    ) -> None:
        """``app``: one memcluster app for every trpc app; ``wait_s`` > 0: ``store_session`` waits up to
        that long for the ingest job (so the next search already sees the turns)."""
        super().__init__(memory_service_config, enabled)
        self.client, self.app, self.wait_s = client, app, wait_s
        self.jobs: dict[str, str] = {}
        """The latest ingest job id per trpc session id."""
        self.errors: dict[str, MemclientError] = {}
        """The latest failed ``store_session`` per trpc session id (the Runner only logs it)."""

    async def store_session(self, session: Session, agent_context: AgentContext | None = None) -> None:
        if not self.enabled:
            return
        events = events_of(session)
        if not events:
            return
        try:
            app, user = split_key(session.save_key, self.app)
            job_id = (await self.client.ingest(app, user, session.id, events)).job_id
        except MemclientError as exc:
            self.errors[session.id] = exc
            raise
        self.errors.pop(session.id, None)
        self.jobs[session.id] = job_id
        if self.wait_s > 0 and not (await self.client.wait_job(job_id, self.wait_s)).finished:
            raise TimeoutError(f"ingest job {job_id} did not finish within {self.wait_s} s")

    async def search_memory(self, key: str, query: str, limit: int = 10,
                            agent_context: AgentContext | None = None) -> SearchMemoryResponse:
        if not self.enabled or not query.strip():
            return SearchMemoryResponse()
        app, user = split_key(key, self.app)
        hits = await self.client.search(app, user, query, max_results=max(1, limit))
        return SearchMemoryResponse(memories=[_memory_entry(h) for h in hits])

    async def close(self) -> None:
        await self.client.close()


def _declaration(name: str, description: str, arg: str, arg_doc: str) -> FunctionDeclaration:
    return FunctionDeclaration(name=name, description=description, parameters=Schema(
        type=Type.OBJECT, properties={arg: Schema(type=Type.STRING, description=arg_doc)}, required=[arg]))


class SearchMemoryTool(BaseTool):
    """``search_memory(query)``: the user's memories for the query (user from the invocation context)."""

    def __init__(self, client: AsyncMemoryClient, *, app: str | None = None, limit: int = 10) -> None:
        super().__init__(name="search_memory", description="Search through past conversations and memories")
        self.client, self.app, self.limit = client, app, limit

    def _get_declaration(self) -> FunctionDeclaration | None:
        return _declaration("search_memory", "Search through past conversations and memories", "query",
                            "The query to search memory for.")

    async def _run_async_impl(self, *, tool_context: InvocationContext, args: dict[str, Any]) -> dict[str, Any]:
        user = tool_context.user_id
        hits = await self.client.search(self.app or tool_context.app_name, user, str(args.get("query", "")),
                                        max_results=self.limit)
        if hits:
            return {"status": "success", "memories": "\n".join(f"- {h.entry.text}" for h in hits), "user_id": user}
        return {"status": "no_memories", "message": "No relevant memories found", "user_id": user}


class SaveMemoryTool(BaseTool):
    """``save_memory(content)``: store one memory of the user (user from the invocation context)."""

    def __init__(self, client: AsyncMemoryClient, *, app: str | None = None) -> None:
        super().__init__(name="save_memory", description="Save important information to memory")
        self.client, self.app = client, app

    def _get_declaration(self) -> FunctionDeclaration | None:
        return _declaration("save_memory", "Save important information to memory", "content",
                            "The content to save to memory.")

    async def _run_async_impl(self, *, tool_context: InvocationContext, args: dict[str, Any]) -> dict[str, Any]:
        user = tool_context.user_id
        try:
            entry = await self.client.add(self.app or tool_context.app_name, user, str(args.get("content", "")))
        except MemclientError as exc:
            return {"status": "error", "message": f"Failed to save memory: {exc}", "user_id": user}
        return {"status": "success", "message": "Information saved to memory",
                "result": {"id": entry.id, "memory": entry.text}, "user_id": user}
