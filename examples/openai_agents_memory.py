"""An OpenAI Agents SDK agent with memcluster memory (``memcluster-client[openai-agents]``).

The agent gets the app's memory tools (``amemory_tools``: memory_add, memory_search, ...), instructions
that start with the preload block of the user's memories that matter for the message (``with_memory``)
and a :class:`MemclusterSession` per conversation (the turns land in the user's archive)::

    OPENAI_BASE_URL=http://127.0.0.1:8001/v1 OPENAI_MODEL=qwen MEMCLUSTER_URL=http://127.0.0.1:8000 \\
        python examples/openai_agents_memory.py alice session-1 "I am allergic to peanuts"
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from memclient import AsyncMemoryClient
from memclient.integrations.openai_agents import MemclusterSession, amemory_tools, with_memory

INSTRUCTIONS = ("You are a helpful assistant with long-term memory. Save lasting facts about the user with "
                "memory_add; use memory_search when an answer may depend on an earlier session.")


async def turn(mc: AsyncMemoryClient, llm: AsyncOpenAI, model: str, app: str, user: str, session: str,
               text: str) -> str:
    """One run of the agent for ``user`` in ``session``; returns the final answer."""
    agent = Agent(name="assistant", instructions=with_memory(mc, app, user, INSTRUCTIONS),
                  tools=await amemory_tools(mc, app, user),  # type: ignore[arg-type]
                  model=OpenAIChatCompletionsModel(model=model, openai_client=llm))
    result = await Runner.run(agent, text, session=MemclusterSession(session, mc, app, user),
                              context={"message": text})
    return str(result.final_output)


async def main(argv: list[str]) -> int:
    set_tracing_disabled(True)
    user, session, text = argv[0], argv[1], " ".join(argv[2:])
    async with AsyncMemoryClient(os.environ.get("MEMCLUSTER_URL", "http://127.0.0.1:8000"),
                                 api_key=os.environ.get("MEMCLUSTER_API_KEY")) as mc:
        print(await turn(mc, AsyncOpenAI(), os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), "agents-demo", user,
                         session, text))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
