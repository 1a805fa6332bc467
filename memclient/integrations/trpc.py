"""trpc-agent-py on memcluster (``pip install "memcluster-client[trpc]"``)::

    service = MemclusterMemoryService(AsyncMemoryClient("http://127.0.0.1:8000", api_key="..."), enabled=True)
    runner = Runner(app_name="my-app", agent=agent, session_service=InMemorySessionService(),
                    memory_service=service)          # agent tools: [load_memory_tool]

- :class:`MemclusterMemoryService`, the framework's ``BaseMemoryService`` (``MemoryServiceABC``).

  Identity mapping (as trpc-agent-py's memory service maps ``save_key``): the framework's memory key is
  ``session.save_key`` = ``"{app_name}/{user_id}"`` (``search_memory`` gets the same ``key``);
  memcluster's app is ``app_name`` (or the ``app`` given to the service, for every trpc app) and
  memcluster's user is ``user_id``; the trpc ``session.id`` is memcluster's session. memcluster ids
  cannot contain ``/``, so the split at the first ``/`` is unambiguous; a ``user_id`` that breaks the URL
  rule (``org/alice``, ``..``: ``memclient.segments``) is an :class:`memclient.InvalidRequest` naming
  ``user`` before anything is sent (:func:`split_key` raises it; the service logs it, keeps it in
  ``errors`` for a store and finds nothing for a search).

  ``store_session`` sends the session's user and model text events to memcluster's ingest (the whole
  session each time is fine: the server's cursor extracts only the delta); function calls and their
  responses and partial (streamed) events are left out. ``search_memory`` is memcluster's hybrid
  search, as the framework's ``SearchMemoryResponse`` of ``MemoryEntry`` (content, author = the
  memory's source, timestamp = event time or creation time, ISO-8601). Disabled (``enabled`` False,
  the framework's default, or ``MemoryServiceConfig(enabled=False)``): stores nothing, finds nothing.
  TTL: memcluster expires memories by the server's per-app TTL setting (``ttl`` with optional refresh
  on access); the framework's ``MemoryServiceConfig.ttl`` is not sent. ``close`` closes the client.

- :class:`SearchMemoryTool` / :class:`SaveMemoryTool`: the ``search_memory(query)`` and
  ``save_memory(content)`` tools in the style of trpc-agent-py's Mem0 tools, the app and user taken from
  the invocation context (never from a tool argument). ``search_memory`` answers
  ``{status: success, memories, user_id}`` or ``{status: no_memories, message, user_id}``;
  ``save_memory`` answers ``{status: success, message, result, user_id}`` or
  ``{status: error, message, user_id}`` (the error names the cause).

Memory never blocks the model (:mod:`memclient.guard`): a failed ``search_memory`` (memcluster down, a
5xx, a ``user_id`` a URL would change) finds nothing and logs a warning; the tools answer
``{status: error, message, error, user_id}`` (``error``: ``{"error", "status", "field", "message"}``)
instead of raising; a failed ``store_session`` is retried (the client's retry policy), then kept in
``writes`` and sent before the next store (a session's newer store replaces its older pending one: the
whole session is sent each time) and on ``close``; it never raises. ``errors`` maps a trpc session id
to its latest failure (field and message), until a later store of that session succeeds.
"""

from __future__ import annotations

import logging
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
from memclient.guard import PendingWrites, read_or, tool_error  # noqa: E402
from memclient.segments import segment_problem  # noqa: E402

logger = logging.getLogger(__name__)

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
        """The latest failed ``store_session`` per trpc session id (also logged)."""
        self.writes: PendingWrites[tuple[str, str, list[dict[str, Any]]]] = PendingWrites(
            "trpc store_session", self._ingest, client.retry)
        """The stores memcluster has not taken yet (``writes.pending``) or refused (``writes.refused``), each
        ``(save_key, session id, events)``."""

    async def _ingest(self, write: tuple[str, str, list[dict[str, Any]]]) -> None:
        save_key, session_id, events = write
        try:
            app, user = split_key(save_key, self.app)
            job_id = (await self.client.ingest(app, user, session_id, events)).job_id
        except MemclientError as exc:
            self.errors[session_id] = exc
            raise
        self.errors.pop(session_id, None)
        self.jobs[session_id] = job_id

    async def store_session(self, session: Session, agent_context: AgentContext | None = None) -> None:
        if not self.enabled:
            return
        events = events_of(session)
        if not events:
            return
        self.writes.discard(lambda w: w[1] != session.id)  # this store sends the whole session again
        if not await self.writes.write((session.save_key, session.id, events)) or session.id in self.errors:
            return
        job_id = self.jobs[session.id]
        if self.wait_s > 0 and not (await self.client.wait_job(job_id, self.wait_s)).finished:
            logger.warning("ingest job %s did not finish within %s s", job_id, self.wait_s)

    async def search_memory(self, key: str, query: str, limit: int = 10,
                            agent_context: AgentContext | None = None) -> SearchMemoryResponse:
        if not self.enabled or not query.strip():
            return SearchMemoryResponse()
        async def search() -> list[SearchHit]:
            app, user = split_key(key, self.app)
            return await self.client.search(app, user, query, max_results=max(1, limit))

        nothing: list[SearchHit] = []
        hits = await read_or(f"trpc search_memory of {key!r}", search, nothing)
        return SearchMemoryResponse(memories=[_memory_entry(h) for h in hits])

    async def close(self) -> None:
        """Send the pending stores (one more try; what fails stays in ``writes``), then close the client."""
        await self.writes.flush()
        await self.client.close()


def _failed(tool: str, what: str, exc: MemclientError, user: str) -> dict[str, Any]:
    """A tool's error result in the Mem0 tools' shape, with :func:`memclient.guard.tool_error`'s body."""
    return {"status": "error", "message": f"{what}: {exc}", "error": tool_error(tool, exc), "user_id": user}


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
        try:
            hits = await self.client.search(self.app or tool_context.app_name, user, str(args.get("query", "")),
                                            max_results=self.limit)
        except MemclientError as exc:
            return _failed(self.name, "Failed to search memory", exc, user)
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
            return _failed(self.name, "Failed to save memory", exc, user)
        return {"status": "success", "message": "Information saved to memory",
                "result": {"id": entry.id, "memory": entry.text}, "user_id": user}
