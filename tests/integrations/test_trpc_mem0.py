"""trpc-agent-py's own Mem0 integration pointed at memcluster's ``/mem0``, for real: its ``SaveMemoryTool`` /
``SearchMemoryTool`` (``trpc_agent_sdk.tools``) in a Runner with the scripted model, and its
``Mem0MemoryService`` as the Runner's memory service (post-turn store, ``load_memory`` in a later session),
each over ``mem0.AsyncMemoryClient(api_key=..., host=<base>/mem0)``.

trpc-agent-py 1.2.0 is written for the mem0ai 1.x client (2.x refuses the top-level ``user_id`` its
search sends), which ``scripts/trpc-venv`` installs into the overlay; run this module there
(``.venv-trpc/bin/python -m pytest tests/integrations/test_trpc_mem0.py``); elsewhere it is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("MEM0_TELEMETRY", "False")  # mem0ai reads it at import: no telemetry calls
pytest.importorskip("trpc_agent_sdk", reason="trpc-agent-py lives in the scripts/trpc-venv overlay (mcp<2)")
pytest.importorskip("mem0", reason="the scripts/trpc-venv overlay has mem0ai 1.x")
if int(version("mem0ai").split(".")[0]) >= 2:
    pytest.skip("trpc-agent-py 1.2.0's Mem0 code needs the mem0ai 1.x client (scripts/trpc-venv installs it)",
                allow_module_level=True)

from mem0 import AsyncMemoryClient as Mem0Client
from trpc_agent_sdk.agents import LlmAgent
from trpc_agent_sdk.memory import MemoryServiceConfig
from trpc_agent_sdk.memory.mem0_memory_service import Mem0MemoryService
from trpc_agent_sdk.models import OpenAIModel
from trpc_agent_sdk.runners import Runner
from trpc_agent_sdk.sessions import InMemorySessionService
from trpc_agent_sdk.tools import load_memory_tool
from trpc_agent_sdk.tools.mem0_tool import SaveMemoryTool, SearchMemoryTool

from examples.trpc_agent_memory import ask
from memclient import AsyncMemoryClient
from testkit.scripted_llm import ScriptedLLM, iter_tool_messages, tool_call
from tests.integrations.server_process import server_process, server_python

ROOT = Path(__file__).resolve().parents[2]
APP = "mem0"  # auth is off: the Mem0 API's default app


@pytest.fixture(scope="module")
def memcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with server_process(server_python(), tmp_path_factory.mktemp("trpc-mem0"), ROOT) as url:
        yield url


def _tool_text(request: dict[str, Any]) -> str:
    return " ".join(str(m.get("content")) for m in iter_tool_messages(request))


def answer(request: dict[str, Any]) -> str:
    return "Skip the peanut bars." if "peanuts" in _tool_text(request) else "Any snack is fine."


def _model(llm: ScriptedLLM) -> OpenAIModel:
    return OpenAIModel(model_name="scripted", base_url=llm.base_url, api_key="test")


async def test_trpc_mem0_tools_save_then_search_in_a_new_session(memcluster: str) -> None:
    client = Mem0Client(api_key="any-key", host=f"{memcluster}/mem0")
    save = [tool_call("save_memory", {"content": "I am allergic to peanuts"})]
    search = [tool_call("search_memory", {"query": "peanuts allergy"})]
    with ScriptedLLM([save, "Saved.", search, answer, search, answer]) as llm:
        agent = LlmAgent(name="assistant", model=_model(llm), instruction="Use your memory tools.",
                         tools=[SearchMemoryTool(client), SaveMemoryTool(client)])
        runner = Runner(app_name="trpc-mem0", agent=agent, session_service=InMemorySessionService())
        assert await ask(runner, "tilda", "s1", "Remember that I am allergic to peanuts.") == "Saved."
        assert '"status": "success"' in _tool_text(llm.requests[1])  # save_memory's add went through
        assert await ask(runner, "tilda", "s2", "Which snack should I skip?") == "Skip the peanut bars."
        assert "allergic to peanuts" in _tool_text(llm.requests[3])  # search_memory found it
        assert await ask(runner, "umar", "s3", "Which snack should I skip?") == "Any snack is fine."
        assert "no_memories" in _tool_text(llm.requests[5])  # another user: nothing of tilda's
        await runner.close()
    async with AsyncMemoryClient(memcluster) as mc:
        assert any("allergic to peanuts" in e.text for e in await mc.read(APP, "tilda"))
        assert await mc.read(APP, "umar") == []


async def test_trpc_mem0_memory_service_stores_turns_and_recalls_them(memcluster: str) -> None:
    client = Mem0Client(api_key="any-key", host=f"{memcluster}/mem0")
    service = Mem0MemoryService(memory_service_config=MemoryServiceConfig(enabled=True), mem0_client=client,
                                infer=False)
    recall = [tool_call("load_memory", {"query": "snack allergy peanuts"})]
    with ScriptedLLM(["Noted: no peanuts for you.", recall, answer]) as llm:
        agent = LlmAgent(name="assistant", model=_model(llm), instruction="Recall with load_memory.",
                         tools=[load_memory_tool])
        runner = Runner(app_name="trpc-app", agent=agent, session_service=InMemorySessionService(),
                        memory_service=service)
        assert await ask(runner, "vera", "session-1", "I'm allergic to peanuts.") == "Noted: no peanuts for you."
        # the post-turn store (save_key "trpc-app/vera": Mem0 agent "trpc-app", user "vera", run = the session)
        async with AsyncMemoryClient(memcluster) as mc:
            stored = {e.text: e.metadata for e in await mc.read(APP, "vera")}
        assert stored["I'm allergic to peanuts."] == {"mem0_agent_id": "trpc-app", "mem0_run_id": "session-1",
                                                      "real_role": "user"}
        assert stored["Noted: no peanuts for you."]["real_role"] == "assistant"

        probe = httpx.post(f"{memcluster}/mem0/v2/memories/search/", timeout=30,
                           json={"query": "peanuts", "user_id": "vera", "filters": {"run_id": "*"}})
        if probe.status_code == 422 and "wildcard" in probe.text:
            pytest.xfail("Mem0MemoryService searches with run_id '*' (a Mem0 wildcard), which the Mem0 API "
                         "refuses until its filters serve wildcards (issue 24, Mem0 filters)")
        assert await ask(runner, "vera", "session-2", "Which snack should I skip?") == "Skip the peanut bars."
        assert "allergic to peanuts" in _tool_text(llm.requests[2])
        await runner.close()


async def test_mem0ai_1x_client_sends_its_ping_project_ids_on_every_call(memcluster: str) -> None:
    """mem0ai 1.x takes org_id/project_id from /v1/ping/ (the key's app) and sends them with each request."""
    client = Mem0Client(api_key="any-key", host=f"{memcluster}/mem0")
    assert (client.org_id, client.project_id) == (APP, APP)
    added = await client.add([{"role": "user", "content": "Wren keeps bees on the roof."}], user_id="wren",
                             infer=False)
    mid = added["results"][0]["id"]
    assert (await client.get(mid))["memory"] == "Wren keeps bees on the roof."
    listed = await client.get_all(user_id="wren")
    assert [m["id"] for m in listed["results"]] == [mid]
    found = await client.search("who keeps bees", user_id="wren")
    assert found["results"][0]["id"] == mid
    updated = await client.update(mid, text="Wren keeps bees in the garden.")
    assert updated["memory"] == "Wren keeps bees in the garden."
    assert [h["event"] for h in await client.history(updated["id"])][:1] == ["ADD"]
    assert any(u["name"] == "wren" for u in (await client.users())["results"])
    await client.delete(updated["id"])
    assert (await client.get_all(user_id="wren"))["results"] == []
    await client.add("Wren's hive is blue.", user_id="wren", infer=False)
    await client.delete_all(user_id="wren")
    assert (await client.get_all(user_id="wren"))["results"] == []

    other = httpx.post(f"{memcluster}/mem0/v1/memories/", timeout=30, json={
        "messages": [{"role": "user", "content": "x"}], "user_id": "wren", "infer": False,
        "org_id": "someone-else", "project_id": APP})
    assert other.status_code == 422 and other.json()["field"] == "org_id"
    assert httpx.get(f"{memcluster}/mem0/v1/entities/", params={"project_id": "p2"}, timeout=30).status_code == 422
