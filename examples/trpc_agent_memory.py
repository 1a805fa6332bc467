"""A trpc-agent-py agent with memcluster as its MemoryService (``memcluster-client[trpc]``).

The Runner stores every finished turn through ``MemclusterMemoryService.store_session`` (memcluster's
ingest: verbatim turns or, with an extractor configured on the server, extracted memories); the
agent recalls them with the framework's ``load_memory`` tool in later sessions, and can also use the
``search_memory`` / ``save_memory`` tools directly::

    OPENAI_BASE_URL=http://127.0.0.1:8001/v1 OPENAI_MODEL=qwen MEMCLUSTER_URL=http://127.0.0.1:8000 \\
        python examples/trpc_agent_memory.py alice session-1 "I am allergic to peanuts"

trpc-agent-py 1.2.0 needs mcp<2 (memcluster's MCP server needs mcp 2): in this repository run it in
the overlay environment of ``scripts/trpc-venv``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from trpc_agent_sdk.agents import LlmAgent
from trpc_agent_sdk.models import OpenAIModel
from trpc_agent_sdk.runners import Runner
from trpc_agent_sdk.sessions import InMemorySessionService
from trpc_agent_sdk.tools import load_memory_tool
from trpc_agent_sdk.types import Content, Part

from memclient import AsyncMemoryClient
from memclient.integrations.trpc import MemclusterMemoryService, SaveMemoryTool

INSTRUCTION = ("Use load_memory to recall relevant past conversations before answering; save lasting facts "
               "about the user with save_memory.")


def build_runner(mc: AsyncMemoryClient, model: OpenAIModel, app: str, *, wait_s: float = 0.0) -> Runner:
    """A Runner whose memory service is memcluster (the agent has load_memory and save_memory)."""
    agent = LlmAgent(name="assistant", model=model, instruction=INSTRUCTION,
                     tools=[load_memory_tool, SaveMemoryTool(mc)])
    service = MemclusterMemoryService(mc, enabled=True, wait_s=wait_s)
    return Runner(app_name=app, agent=agent, session_service=InMemorySessionService(), memory_service=service,
                  close_memory_service_on_close=False)


async def ask(runner: Runner, user: str, session: str, text: str) -> str:
    """One turn; returns the agent's final text (the Runner stores the session afterwards)."""
    answer = ""
    async for event in runner.run_async(user_id=user, session_id=session,
                                        new_message=Content(role="user", parts=[Part(text=text)])):
        if event.content and event.content.parts and not event.partial:
            answer = "".join(p.text for p in event.content.parts if p.text) or answer
    return answer


async def main(argv: list[str]) -> int:
    user, session, text = argv[0], argv[1], " ".join(argv[2:])
    model = OpenAIModel(model_name=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
                        base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                        api_key=os.environ.get("OPENAI_API_KEY", ""))
    async with AsyncMemoryClient(os.environ.get("MEMCLUSTER_URL", "http://127.0.0.1:8000"),
                                 api_key=os.environ.get("MEMCLUSTER_API_KEY")) as mc:
        print(await ask(build_runner(mc, model, "trpc-demo"), user, session, text))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
