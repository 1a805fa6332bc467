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

Errors of the service raise :class:`memclient.MemclientError` subclasses (a failing tool call fails
the run with that error instead of answering the model with nothing).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from memclient.integrations.extras import require

require("openai-agents")

from agents import Agent, FunctionTool, RunContextWrapper, SQLiteSession  # noqa: E402
from agents.items import TResponseInputItem  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from memclient import AsyncMemoryClient, MemoryClient  # noqa: E402

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


class MemclusterSession(Session):
    """An Agents SDK session whose user/assistant messages land in memcluster's archive."""

    def __init__(
        self,
        session_id: str,
        client: AsyncMemoryClient,
        app: str,
        user: str,
        *,
        history: Session | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.client, self.app, self.user = client, app, user
        self.history: Session = history if history is not None else SQLiteSession(session_id)
        self.jobs: list[str] = []
        """Ingest job ids, oldest first (poll them with ``client.job``)."""
        self.turns: list[tuple[str, str]] = []
        """(item fingerprint, event id) of the items this object archived, oldest first."""

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await self.history.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Send the messages to memcluster first (an error raises and nothing is added), then keep them."""
        pairs = archived(items)
        if pairs:
            events = [e for _, e in pairs]
            self.jobs.append((await self.client.ingest(self.app, self.user, self.session_id, events)).job_id)
            self.turns += [(fingerprint(i), e["id"]) for i, e in pairs]
        await self.history.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Pop the newest item; if it is the newest item this object archived, its archived turn is removed
        too (an error raises after the pop: the history no longer has the item)."""
        item = await self.history.pop_item()
        if item is not None and self.turns and self.turns[-1][0] == fingerprint(item):
            _, event_id = self.turns.pop()
            await self.client.delete_turn(self.app, self.user, self.session_id, event_id)
        return item

    async def clear_session(self) -> None:
        """Remove the session's archived turns (and the memories made only from them), then the history."""
        await self.client.delete_session(self.app, self.user, self.session_id)
        self.turns.clear()
        await self.history.clear_session()


ToolCall = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def _function_tools(schemas: Sequence[Mapping[str, Any]], call: ToolCall) -> list[FunctionTool]:
    tools: list[FunctionTool] = []
    for schema in schemas:
        fn = schema.get("function", schema)
        name = str(fn["name"])

        async def invoke(_ctx: ToolContext[Any], arguments: str, name: str = name) -> str:
            args = json.loads(arguments) if arguments.strip() else {}
            return json.dumps(await call(name, args), ensure_ascii=False)

        tools.append(FunctionTool(name=name, description=str(fn.get("description", "")),
                                  params_json_schema=dict(fn.get("parameters") or {"type": "object", "properties": {}}),
                                  on_invoke_tool=invoke, strict_json_schema=False))
    return tools


def memory_tools(client: MemoryClient, app: str, user: str, mode: str | None = None) -> list[FunctionTool]:
    """The app's exposed memory tools for ``user`` (``mode`` None: the app's mode), calling through a sync
    client (each call runs in a worker thread)."""

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(client.call_tool, app, user, name, args, mode)

    return _function_tools(client.tools(app, mode), call)


async def amemory_tools(client: AsyncMemoryClient, app: str, user: str, mode: str | None = None) -> list[FunctionTool]:
    """:func:`memory_tools` for an :class:`AsyncMemoryClient`."""

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return await client.call_tool(app, user, name, args, mode)

    return _function_tools(await client.tools(app, mode), call)


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
    apply (budget N: the newest N when there are more). An empty block leaves ``instructions`` alone.
    """

    async def build(ctx: RunContextWrapper[Any], _agent: Agent[Any]) -> str:
        block = (await client.preload(app, user, budget=budget, message=_message_of(ctx.context),
                                      playbook=playbook)).text
        return f"{block}\n\n{instructions}".strip() if block else instructions

    return build
