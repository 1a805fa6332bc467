"""The trpc-agent-py adapter against a live memcluster: the framework's Runner (LlmAgent, OpenAIModel
on the scripted OpenAI-compatible server, load_memory) over two sessions and two users, on the server
in a process and on the local Ray cluster (``memctl up``); the memory
service's methods, the disabled case, the key mapping, the search_memory/save_memory tools, errors.

trpc-agent-py 1.2.0 pins mcp<2, which cannot share an environment with the MCP server's mcp 2:
run this module in the overlay built by ``scripts/trpc-venv``
(``.venv-trpc/bin/python -m pytest tests/integrations/test_trpc.py``); elsewhere it is skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("trpc_agent_sdk", reason="trpc-agent-py lives in the scripts/trpc-venv overlay (mcp<2)")

from trpc_agent_sdk.memory import BaseMemoryService, MemoryServiceConfig
from trpc_agent_sdk.models import OpenAIModel
from trpc_agent_sdk.sessions import InMemorySessionService
from trpc_agent_sdk.types import Content, Part, SearchMemoryResponse

from examples.trpc_agent_memory import ask, build_runner
from memclient import AsyncMemoryClient, InvalidRequest, Retry, Unavailable
from memclient.integrations.trpc import (
    MemclusterMemoryService,
    SaveMemoryTool,
    SearchMemoryTool,
    split_key,
)
from testkit.scripted_llm import ScriptedLLM, iter_tool_messages, messages_text, tool_call
from tests.integrations.server_process import server_process, server_python
from tests.memctl_cluster import memctl_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def memcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """memcluster in its own process (this environment's mcp 1 cannot import the server's MCP endpoint)."""
    with server_process(server_python(), tmp_path_factory.mktemp("trpc-server"), ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``memctl up`` with an empty HOME (the server's own environment, started from this one)."""
    with memctl_cluster(tmp_path_factory.mktemp("trpc-cluster")) as url:
        yield url


def answer(request: dict[str, Any]) -> str:
    tool_text = " ".join(str(m.get("content")) for m in iter_tool_messages(request))
    return "Skip the peanut bars." if "peanuts" in tool_text else "Any snack is fine."


async def two_sessions(url: str) -> None:
    """Session 1 states a fact, session 2 (new) gets it back through load_memory, a second user sees
    nothing of the first."""
    recall = [tool_call("load_memory", {"query": "snack allergy peanuts"})]
    script = ["Noted: no peanuts for you.", recall, answer, recall, answer]
    async with AsyncMemoryClient(url) as mc:
        with ScriptedLLM(script) as llm:
            model = OpenAIModel(model_name="scripted", base_url=llm.base_url, api_key="test")
            runner = build_runner(mc, model, "trpc-app", wait_s=20)
            assert await ask(runner, "alice", "session-1", "I'm allergic to peanuts.") == \
                "Noted: no peanuts for you."
            assert await ask(runner, "alice", "session-2", "Which snack should I skip?") == "Skip the peanut bars."
            assert "allergic" not in messages_text(llm.requests[1], "user")  # a new session: no old turns
            assert await ask(runner, "bob", "session-3", "Which snack should I skip?") == "Any snack is fine."
            assert "peanuts" not in json.dumps(llm.requests[4]).replace("snack allergy peanuts", "")
            await runner.close()
        # the Runner's store_session sent the turns to ingest: alice has them, bob has none of hers
        alice = [e.text for e in await mc.read("trpc-app", "alice")]
        assert any("allergic to peanuts" in t for t in alice)
        assert not any("peanuts" in e.text for e in await mc.read("trpc-app", "bob"))


async def test_runner_two_sessions_two_users(memcluster: str) -> None:
    await two_sessions(memcluster)


async def test_runner_on_the_local_cluster(local_cluster: str) -> None:
    """The same two sessions on memcluster's Ray cluster as ``memctl up`` runs it (Serve ingress, shard
    actors, the packaged embedder, verbatim extraction)."""
    await two_sessions(local_cluster)


def _session(service_events: list[tuple[str, str]], app: str = "trpc-unit", user: str = "carol") -> Any:
    from trpc_agent_sdk.events import Event
    from trpc_agent_sdk.sessions import Session

    session = Session(id="s-unit", app_name=app, user_id=user, save_key=f"{app}/{user}", state={})
    for author, text in service_events:
        role = "user" if author == "user" else "model"
        session.events.append(Event(invocation_id="i1", author=author,
                                    content=Content(role=role, parts=[Part(text=text)])))
    return session


async def test_service_methods_and_mapping(memcluster: str) -> None:
    async with AsyncMemoryClient(memcluster) as mc:
        service = MemclusterMemoryService(mc, enabled=True, wait_s=20)
        assert isinstance(service, BaseMemoryService) and service.enabled
        await service.store_session(_session([("user", "My bike is a red Brompton."), ("assistant", "Nice!")]))
        assert service.jobs["s-unit"]
        found = await service.search_memory("trpc-unit/carol", "bike Brompton", limit=3)
        assert isinstance(found, SearchMemoryResponse) and found.memories
        top = found.memories[0]
        assert "Brompton" in (top.content.parts[0].text or "") and top.author == "user" and top.timestamp
        assert len((await service.search_memory("trpc-unit/carol", "bike", limit=1)).memories) == 1
        assert (await service.search_memory("trpc-unit/dan", "bike Brompton")).memories == []
        assert (await service.search_memory("trpc-unit/carol", "  ")).memories == []
        with pytest.raises(ValueError, match="app_name/user_id"):
            await service.search_memory("no-slash", "bike")
        # one memcluster app for every trpc app
        fixed = MemclusterMemoryService(mc, enabled=True, app="trpc-unit", wait_s=20)
        assert (await fixed.search_memory("other-app/carol", "bike Brompton")).memories
    assert split_key("a/u") == ("a", "u") and split_key("a/u", "x") == ("x", "u")


async def test_a_user_id_a_url_would_change_surfaces_naming_the_field(
        memcluster: str, caplog: pytest.LogCaptureFixture) -> None:
    """trpc user ids such as 'org/alice' cannot be a memcluster user (the URL rule): the error names ``user``
    in ``service.errors`` (the post-turn store) and in a warning; nothing is sent, and memory never blocks
    the run (the search finds nothing, the store does not raise)."""
    for key in ("app/org/alice", "app/..", "app/%2e"):
        with pytest.raises(InvalidRequest) as err:
            split_key(key)
        assert err.value.field == "user"
    async with AsyncMemoryClient(memcluster) as mc:
        service = MemclusterMemoryService(mc, enabled=True, wait_s=20)
        await service.store_session(_session([("user", "My bike is green.")], user="org/hana"))
        assert service.errors["s-unit"].field == "user" and service.writes.pending == []
        await service.store_session(_session([("user", "My bike is green.")], user="hana"))
        assert "s-unit" not in service.errors  # a later success clears it

        recall = [tool_call("load_memory", {"query": "bike"})]
        with ScriptedLLM([recall, "No bike on record."]) as llm:
            model = OpenAIModel(model_name="scripted", base_url=llm.base_url, api_key="test")
            runner = build_runner(mc, model, "trpc-app", wait_s=20)
            failures = []
            with caplog.at_level(logging.WARNING, logger="memclient.guard"):
                async for event in runner.run_async(user_id="org/ines", session_id="s-org",
                                                    new_message=Content(role="user", parts=[Part(text="My bike?")])):
                    if event.error_code:
                        failures.append(event.error_message or "")
            await runner.close()
        assert failures == []  # the model went on without memory
        assert "user must not contain '/'" in caplog.text
        memory = runner.memory_service
        assert isinstance(memory, MemclusterMemoryService)
        assert memory.errors["s-org"].field == "user"


async def test_disabled_stores_and_finds_nothing(memcluster: str) -> None:
    async with AsyncMemoryClient(memcluster) as mc:
        for off in (MemclusterMemoryService(mc),
                    MemclusterMemoryService(mc, MemoryServiceConfig(enabled=False), enabled=True)):
            assert not off.enabled
            await off.store_session(_session([("user", "The secret word is pineapple.")], user="erin"))
            assert off.jobs == {}
            assert (await off.search_memory("trpc-unit/erin", "secret word")).memories == []
        assert await mc.read("trpc-unit", "erin") == []
        on = MemclusterMemoryService(mc, MemoryServiceConfig(enabled=True))
        assert on.enabled
        await on.close()


async def test_memory_down_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    """503 on every call: the search finds nothing (a warning), the store is retried, recorded and kept,
    then sent first by the next store once memcluster is back."""
    up = {"ok": False}
    sent: list[str] = []

    def service_of(request: httpx.Request) -> httpx.Response:
        if not up["ok"]:
            return httpx.Response(503, json={"error": "StoreError", "field": "store", "message": "down"})
        sent.append(request.url.path)
        return httpx.Response(202, json={"job_id": "j1", "status": "queued"})

    async with AsyncMemoryClient(transport=httpx.MockTransport(service_of), retry=Retry(attempts=2, backoff=0)) as mc:
        service = MemclusterMemoryService(mc, enabled=True)
        with caplog.at_level(logging.WARNING, logger="memclient.guard"):
            assert (await service.search_memory("a/u", "anything")).memories == []
            await service.store_session(_session([("user", "hello")]))
        assert "memory read failed" in caplog.text and "kept for a later try" in caplog.text
        assert isinstance(service.errors["s-unit"], Unavailable) and len(service.writes.pending) == 1
        await service.store_session(_session([("user", "hello"), ("user", "again")]))
        assert len(service.writes.pending) == 1  # the newer store of the session replaced the older one
        up["ok"] = True
        await service.close()  # close sends what is pending
        assert service.writes.pending == [] and "s-unit" not in service.errors and len(sent) == 1


async def test_tools_take_the_user_from_the_invocation_context(memcluster: str) -> None:
    from trpc_agent_sdk.agents import LlmAgent
    from trpc_agent_sdk.context import AgentContext, InvocationContext

    async with AsyncMemoryClient(memcluster) as mc:
        sessions = InMemorySessionService()
        agent = LlmAgent(name="a", model=OpenAIModel(model_name="m", base_url="http://127.0.0.1:9", api_key="x"))

        async def context(user: str) -> InvocationContext:
            session = await sessions.create_session(app_name="trpc-tools", user_id=user, session_id=f"s-{user}")
            return InvocationContext(session_service=sessions, invocation_id="inv", agent=agent, session=session,
                                     agent_context=AgentContext())

        save, search = SaveMemoryTool(mc), SearchMemoryTool(mc)
        assert save.name == "save_memory" and search.name == "search_memory"
        decl = search._get_declaration()
        assert decl is not None and decl.parameters is not None and decl.parameters.required == ["query"]
        frank = await context("frank")
        saved = await save.run_async(tool_context=frank, args={"content": "Frank plays the oboe."})
        assert saved["status"] == "success" and saved["user_id"] == "frank" and saved["result"]["id"]
        got = await search.run_async(tool_context=frank, args={"query": "oboe"})
        assert got["status"] == "success" and "Frank plays the oboe." in got["memories"]
        gina = await context("gina")
        assert (await search.run_async(tool_context=gina, args={"query": "oboe"}))["status"] == "no_memories"
        failed = await save.run_async(tool_context=gina, args={"content": ""})
        assert failed["status"] == "error" and "text" in failed["message"] and failed["user_id"] == "gina"

    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "Internal", "message": "boom"})

    async with AsyncMemoryClient(transport=httpx.MockTransport(down)) as broken:
        failed = await SearchMemoryTool(broken).run_async(tool_context=frank, args={"query": "oboe"})
        assert failed["status"] == "error" and "boom" in failed["message"] and failed["error"]["status"] == 500
