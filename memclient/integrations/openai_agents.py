"""OpenAI Agents SDK on memcluster (``pip install "memcluster-client[openai-agents]"``)::

    mc = AsyncMemoryClient("http://127.0.0.1:8000", api_key="...")
    agent = Agent(name="assistant", instructions=with_memory(mc, "my-app", "alice", "Be brief."),
                  tools=await amemory_tools(mc, "my-app", "alice"))
    await Runner.run(agent, "Hi", session=MemclusterSession("s1", mc, "my-app", "alice"))

- :class:`MemclusterSession`, an SDK ``Session``: the conversation items of one session. Every item
  added is kept as the session's history (``get_items`` / ``pop_item`` / ``clear_session``, in an
  inner SDK session, by default an in-memory ``SQLiteSession``) and its user and assistant messages
  are sent to memcluster's ingest, so they land in the user's archive: session recall finds them in
  later sessions and, on a server with an extractor, auto memory extracts from them. ``pop_item``
  also removes the popped item's archived turn (when it was archived through this session object:
  tool items never are) and ``clear_session`` all archived turns of the session, each with the
  memories made only from them (``DELETE .../sessions/{session}[/events/{id}]``).
- :func:`memory_tools` / :func:`amemory_tools`: the app's exposed memory tools (``GET .../tools``) as
  SDK ``FunctionTool`` objects bound to one app and user; each call goes to ``POST .../tools/{name}``.
- :func:`with_memory`: dynamic ``instructions`` that prepend the preload block (the memories that
  matter for the run's message, see :meth:`memclient.AsyncMemoryClient.preload`) to yours.

Memory never blocks the model (:mod:`memclient.guard`): a failed preload or tool listing gives the
agent no memory (a warning is logged); a failed tool call (arguments that are not a JSON object, a
4xx, a 5xx, memcluster down) answers the model with ``{"error", "status", "field", "message"}``; the
session's failed sends are retried and kept for the next write (:class:`MemclusterSession`). None of
them raises into the run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from memclient.integrations.extras import require

require("openai-agents")

from agents import Agent, FunctionTool, RunContextWrapper, SQLiteSession  # noqa: E402
from agents.items import TResponseInputItem  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from memclient import AsyncMemoryClient, MemoryClient, NotFound  # noqa: E402
from memclient.guard import PendingWrites, read_or, read_or_sync, tool_arguments, tool_result  # noqa: E402
from memclient.retry import Retry  # noqa: E402

__all__ = ["MemclusterSession", "amemory_tools", "archived", "events_of", "fingerprint", "memory_tools", "with_memory"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("text")).strip()
    return ""


def events_of(items: Sequence[TResponseInputItem], *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The ingest events of SDK items: user and assistant messages with text (tool calls, their outputs
    and reasoning items are not conversation text and are left out)."""
    return [event for _, event in archived(items, now=now)]


def fingerprint(item: TResponseInputItem) -> str:
    """A stable text of an item (to recognise the popped item as the one archived)."""
    return json.dumps(item, sort_keys=True, default=str, ensure_ascii=False)


def archived(items: Sequence[TResponseInputItem], *, now: datetime | None = None
             ) -> list[tuple[TResponseInputItem, dict[str, Any]]]:
    """The items that become ingest events, each with its event (see :func:`events_of`)."""
    at = (now or datetime.now(UTC)).isoformat()
    out: list[tuple[TResponseInputItem, dict[str, Any]]] = []
    for item in items:
        data: Mapping[str, Any] = item if isinstance(item, Mapping) else {}
        role = data.get("role")
        kind = data.get("type", "message")
        if kind != "message" or role not in ("user", "assistant"):
            continue
        text = _text(data.get("content"))
        if text:
            # a fresh id: SDK ids repeat (chat-completions items all carry the same placeholder id)
            out.append((item, {"id": uuid.uuid4().hex, "role": role, "content": text, "timestamp": at}))
    return out


_Write = tuple[str, Any]
"""A pending session write: ``("ingest", [(fingerprint, event), ...])``, ``("delete_turn", event_id)`` or
``("delete_session", None)``."""


class MemclusterSession(Session):
    """An Agents SDK session whose user/assistant messages land in memcluster's archive.

    Memory never blocks the model (:mod:`memclient.guard`): every item is kept in the history first, then
    its messages are sent; a send that fails is retried (``retry``, default the client's policy) and then
    kept in :attr:`writes` (logged), to go first with the next write and on :meth:`close` /
    :meth:`aclose`. The same for the archive deletes of ``pop_item`` and ``clear_session``. Works from
    any event loop (a second ``asyncio.run``, ``Runner.run_sync`` turn after turn).

    ``session_settings`` (the SDK's ``SessionSettings`` or its dict) sets the default item limit of
    :meth:`get_items`, as on the SDK's own sessions. ``close`` closes the history, not the client (it is
    the caller's, shared with the tools and ``with_memory``).
    """

    def __init__(
        self,
        session_id: str,
        client: AsyncMemoryClient,
        app: str,
        user: str,
        *,
        history: Session | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        retry: Retry | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (coerce_session_settings(session_settings) if session_settings is not None
                                 else SessionSettings())
        self.client, self.app, self.user = client, app, user
        self.history: Session = history if history is not None else SQLiteSession(session_id)
        self.jobs: list[str] = []
        """Ingest job ids, oldest first (poll them with ``client.job``)."""
        self.turns: list[tuple[str, str]] = []
        """(item fingerprint, event id) of the items this object archived, oldest first."""
        self.writes: PendingWrites[_Write] = PendingWrites(
            f"session {session_id!r} of {app}/{user}", self._apply, retry if retry is not None else client.retry)
        """The writes memcluster has not taken yet (``writes.pending``) or refused (``writes.refused``)."""

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (None: ``session_settings.limit``; no limit there: all), oldest first."""
        return await self.history.get_items(resolve_session_limit(limit, self.session_settings))

    async def _apply(self, write: _Write) -> None:
        kind, arg = write
        if kind == "ingest":
            events = [e for _, e in arg]
            self.jobs.append((await self.client.ingest(self.app, self.user, self.session_id, events)).job_id)
            self.turns += [(f, e["id"]) for f, e in arg]
        elif kind == "delete_turn":
            try:
                await self.client.delete_turn(self.app, self.user, self.session_id, arg)
            except NotFound:
                pass  # gone already (an earlier try whose answer was lost)
        else:
            await self.client.delete_session(self.app, self.user, self.session_id)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Keep the items, then send their messages to memcluster (never raises for memory: see the class)."""
        await self.history.add_items(items)
        pairs = [(fingerprint(i), e) for i, e in archived(items)]
        if pairs:
            await self.writes.write(("ingest", pairs))

    async def pop_item(self) -> TResponseInputItem | None:
        """Pop the newest item; if it is the newest item this object archived, its archived turn is removed
        too (or, not sent yet, it is not sent)."""
        item = await self.history.pop_item()
        if item is None:
            return None
        mark = fingerprint(item)
        if self._unsend(mark):
            return item
        if self.turns and self.turns[-1][0] == mark:
            _, event_id = self.turns.pop()
            await self.writes.write(("delete_turn", event_id))
        return item

    def _unsend(self, mark: str) -> bool:
        """Drop the newest pending turn when it is the item ``mark``; whether it was."""
        newest = next((w for w in reversed(self.writes.pending) if w[0] == "ingest"), None)
        if newest is None or newest[1][-1][0] != mark:
            return False
        rest = newest[1][:-1]
        self.writes.replace(newest, ("ingest", rest) if rest else None)
        return True

    async def clear_session(self) -> None:
        """Clear the history, then remove the session's archived turns (and the memories made only from them)."""
        await self.history.clear_session()
        self.turns.clear()
        self.writes.discard(lambda _w: False)  # unsent turns and deletes of this session: the delete covers them
        await self.writes.write(("delete_session", None))

    async def aclose(self) -> None:
        """Send what is pending (one more try; what still fails stays in ``writes``), then :meth:`close`."""
        await self.writes.flush()
        self.close()

    def close(self) -> None:
        """Close the history; pending writes get one more try first (in a worker thread with its own
        event loop, so this works inside a running loop too, as the SDK's ``SQLiteSession.close``)."""
        if self.writes.pending:
            flusher = threading.Thread(target=asyncio.run, args=(self._flush_and_release(),),
                                       name=f"memcluster-session-{self.session_id}-close")
            flusher.start()
            flusher.join()
        closer = getattr(self.history, "close", None)
        if callable(closer):
            closer()

    async def _flush_and_release(self) -> None:
        try:
            await self.writes.flush()
        finally:
            await self.client.close()  # the pool of this thread's loop only


ToolCall = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def _function_tools(schemas: Sequence[Mapping[str, Any]], call: ToolCall) -> list[FunctionTool]:
    tools: list[FunctionTool] = []
    for schema in schemas:
        fn = schema.get("function", schema)
        name = str(fn["name"])

        async def invoke(_ctx: ToolContext[Any], arguments: str, name: str = name) -> str:
            async def run() -> dict[str, Any]:
                return await call(name, tool_arguments(arguments))

            return json.dumps(await tool_result(name, run), ensure_ascii=False)

        tools.append(FunctionTool(name=name, description=str(fn.get("description", "")),
                                  params_json_schema=dict(fn.get("parameters") or {"type": "object", "properties": {}}),
                                  on_invoke_tool=invoke, strict_json_schema=False))
    return tools


def memory_tools(client: MemoryClient, app: str, user: str, mode: str | None = None) -> list[FunctionTool]:
    """The app's exposed memory tools for ``user`` (``mode`` None: the app's mode), calling through a sync
    client (each call runs in a worker thread)."""

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(client.call_tool, app, user, name, args, mode)

    nothing: list[dict[str, Any]] = []
    return _function_tools(read_or_sync(f"the memory tools of {app}", lambda: client.tools(app, mode), nothing), call)


async def amemory_tools(client: AsyncMemoryClient, app: str, user: str, mode: str | None = None) -> list[FunctionTool]:
    """:func:`memory_tools` for an :class:`AsyncMemoryClient`."""

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return await client.call_tool(app, user, name, args, mode)

    async def schemas() -> list[dict[str, Any]]:
        return await client.tools(app, mode)

    return _function_tools(await read_or(f"the memory tools of {app}", schemas, []), call)


def _message_of(context: Any) -> str:
    if isinstance(context, str):
        return context
    if isinstance(context, Mapping):
        return str(context.get("message", ""))
    return str(getattr(context, "message", "") or "")


def with_memory(
    client: AsyncMemoryClient, app: str, user: str, instructions: str = "", *, budget: int = 10,
    playbook: str | None = None,
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic agent instructions: the preload block of ``user`` followed by ``instructions``.

    The search message is the run context's ``message`` (``Runner.run(..., context={"message": text})``,
    an object with a ``message`` attribute, or the context string); without one, preload's own rules
    apply (budget N: the newest N when there are more). An empty block leaves ``instructions`` alone, and
    so does a failed preload (memory down: a warning is logged, the run goes on without memory).
    """

    async def build(ctx: RunContextWrapper[Any], _agent: Agent[Any]) -> str:
        async def block() -> str:
            return (await client.preload(app, user, budget=budget, message=_message_of(ctx.context),
                                         playbook=playbook)).text

        text = await read_or(f"preload of {app}/{user}", block, "")
        return f"{text}\n\n{instructions}".strip() if text else instructions

    return build
