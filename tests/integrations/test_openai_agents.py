"""The OpenAI Agents SDK adapter against a live memcluster: the SDK's Runner with the scripted
OpenAI-compatible model over two sessions and two users; MemclusterSession, memory_tools and
with_memory one by one (sync and async clients), error mapping."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    set_tracing_disabled,
)
from agents.memory import Session
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

from examples.openai_agents_memory import turn
from memclient import AsyncMemoryClient, AuthError, InvalidRequest, MemoryClient, NotFound, Retry
from memclient.integrations.openai_agents import (
    MemclusterSession,
    _function_tools,
    amemory_tools,
    events_of,
    memory_tools,
    with_memory,
)
from testkit.scripted_llm import ScriptedLLM, messages_text, tool_call
from tests.serve_apps.conftest import Served

FACT = "The user is allergic to peanuts."
set_tracing_disabled(True)


def answer(request: dict[str, Any]) -> str:
    return "Skip the peanut bars." if "peanuts" in messages_text(request, "system") else "Any snack is fine."


async def two_sessions(url: str, api_key: str | None = None) -> None:
    """The SDK's Runner: session 1 stores a fact through the memory tools, session 2 (new) gets it back
    in the preload block, a second user sees nothing of the first."""
    script = [[tool_call("memory_add", {"memory": FACT, "topics": ["health"]})], "Noted, no peanuts.",
              answer, answer]
    async with AsyncMemoryClient(url, api_key=api_key) as mc:
        with ScriptedLLM(script) as llm:
            model = AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
            said = await turn(mc, model, "scripted", "oa-app", "alice", "s1", "I'm allergic to peanuts.")
            assert said == "Noted, no peanuts."
            assert await turn(mc, model, "scripted", "oa-app", "alice", "s2", "Which snack should I skip?") \
                == "Skip the peanut bars."
            second_session = llm.requests[2]
            assert FACT in messages_text(second_session, "system")
            assert "allergic" not in messages_text(second_session, "user")  # a new session: no old turns
            assert await turn(mc, model, "scripted", "oa-app", "bob", "s3", "Which snack should I skip?") \
                == "Any snack is fine."
            assert "peanuts" not in json.dumps(llm.requests[3])
            # the first request offered the app's exposed tools
            offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
            assert {"memory_add", "memory_search"} <= offered
        assert FACT in [e.text for e in await mc.read("oa-app", "alice")]
        assert not any("peanut" in e.text for e in await mc.read("oa-app", "bob"))  # bob's own turns only
        # the turns of session 1 are in alice's archive: session recall from s2 finds them, not bob's
        hits = (await mc.recall("oa-app", "alice", "allergic peanuts", session="s2"))["hits"]
        assert any(h["session"] == "s1" and "peanuts" in h["content"] for h in hits)
        assert not any("peanut" in h["content"] for h in (await mc.recall("oa-app", "bob", "allergic peanuts"))["hits"])


async def test_runner_two_sessions_two_users(memcluster: Served) -> None:
    await two_sessions(memcluster.url)


async def test_runner_with_memory_down_answers(memcluster: Served) -> None:
    """The SDK's Runner while memcluster fails every call but the tool listing (503): the instructions come
    without memory, the model's memory_add gets the error as its tool result and the run answers; the
    session keeps the items and holds the turns for a later send."""
    async with AsyncMemoryClient(memcluster.url) as live:
        schemas = await live.tools("oa-app")

    def half_down(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith("/tools"):
            return httpx.Response(200, json={"tools": schemas, "mode": "agentic", "memory": "on"})
        return httpx.Response(503, json={"error": "StoreError", "field": "store", "message": "down"})

    script = [[tool_call("memory_add", {"memory": FACT})], "Noted, even without memory."]
    async with AsyncMemoryClient(transport=httpx.MockTransport(half_down), retry=Retry.never()) as mc:
        with ScriptedLLM(script) as llm:
            model = AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
            agent = Agent(name="a", instructions=with_memory(mc, "oa-app", "zoe", "Be brief."),
                          tools=await amemory_tools(mc, "oa-app", "zoe"),  # type: ignore[arg-type]
                          model=OpenAIChatCompletionsModel(model="scripted", openai_client=model))
            session = MemclusterSession("down", mc, "oa-app", "zoe")
            result = await Runner.run(agent, "I'm allergic to peanuts.", session=session,
                                      context={"message": "I'm allergic to peanuts."})
            assert result.final_output == "Noted, even without memory."
            assert messages_text(llm.requests[0], "system") == "Be brief."
            assert "StoreError" in json.dumps(llm.requests[1])  # the tool result the model read
        items = await session.get_items()
        assert items[0] == {"role": "user", "content": "I'm allergic to peanuts."} and len(items) >= 3
        assert session.writes.pending and session.jobs == []


async def test_session_methods(memcluster: Served) -> None:
    async with AsyncMemoryClient(memcluster.url) as mc:
        s = MemclusterSession("sess-a", mc, "oa-app", "carol")
        assert isinstance(s, Session)
        assert await s.get_items() == [] and await s.pop_item() is None
        items: list[Any] = [
            {"role": "user", "content": "My cat is called Miso."},
            {"type": "function_call", "call_id": "c1", "name": "memory_search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "{}"},
            {"type": "message", "role": "assistant", "id": "__fake_id__",
             "content": [{"type": "output_text", "text": "Miso is a lovely name.", "annotations": []}]},
        ]
        await s.add_items(items)
        assert await s.get_items() == items
        assert await s.get_items(limit=1) == items[-1:]
        assert len(s.jobs) == 1
        job = await mc.job(s.jobs[0])
        assert job.job_id == s.jobs[0]
        hits = (await mc.recall("oa-app", "carol", "cat Miso"))["hits"]
        assert sorted(h["role"] for h in hits) == ["assistant", "user"]  # tool items are not archived
        assert await s.pop_item() == items[-1]
        assert await s.get_items() == items[:-1]
        await s.clear_session()
        assert await s.get_items() == []
        assert (await mc.recall("oa-app", "carol", "cat Miso"))["hits"] == []  # the archive is cleared too
        # an own history session can be given
        inner = SQLiteSession("inner")
        s2 = MemclusterSession("sess-b", mc, "oa-app", "carol", history=inner)
        await s2.add_items([{"role": "user", "content": "hello"}])
        assert await inner.get_items() == [{"role": "user", "content": "hello"}]


def test_events_of_keeps_only_message_text() -> None:
    events = events_of([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                        {"role": "system", "content": "rules"}, {"role": "assistant", "content": ""}])
    assert [(e["role"], e["content"]) for e in events] == [("user", "hi")]


async def test_a_refused_send_keeps_the_item_and_records_the_refusal(caplog: pytest.LogCaptureFixture) -> None:
    def bad(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": "ValidationError", "field": "events.0.content", "message": "bad"})

    async with AsyncMemoryClient(transport=httpx.MockTransport(bad)) as mc:
        s = MemclusterSession("s", mc, "a", "u")
        with caplog.at_level(logging.WARNING, logger="memclient.guard"):
            await s.add_items([{"role": "user", "content": "x"}])  # no raise: memory never blocks the run
        assert await s.get_items() == [{"role": "user", "content": "x"}]  # kept first
        assert s.writes.pending == [] and len(s.writes.refused) == 1  # a 4xx is not resent
        refused = s.writes.refused[0][1]
        assert isinstance(refused, InvalidRequest) and refused.field == "events.0.content"
        assert "refused a write" in caplog.text


async def test_memory_down_then_back_nothing_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    """503 and connection refused: the items are kept, the sends retried (the retry policy) and then
    pending; the next add_items sends the pending turns first, in order; close flushes."""
    up = {"ok": False}
    sent: list[list[str]] = []

    def service(request: httpx.Request) -> httpx.Response:
        if not up["ok"]:
            return httpx.Response(503, json={"error": "StoreError", "field": "store", "message": "down"})
        sent.append([e["content"] for e in json.loads(request.content)["events"]])
        return httpx.Response(202, json={"job_id": f"j{len(sent)}", "status": "queued"})

    fast = Retry(attempts=2, backoff=0.0)
    async with AsyncMemoryClient(transport=httpx.MockTransport(service), retry=fast) as mc:
        s = MemclusterSession("s", mc, "a", "u")
        with caplog.at_level(logging.WARNING, logger="memclient.guard"):
            await s.add_items([{"role": "user", "content": "one"}])
            await s.add_items([{"role": "assistant", "content": "two"}])
        assert len(s.writes.pending) == 2 and s.jobs == [] and "kept for a later try" in caplog.text
        # popping an item not sent yet: it is simply not sent
        await s.add_items([{"role": "user", "content": "three"}])
        assert (await s.pop_item()) == {"role": "user", "content": "three"}
        assert len(s.writes.pending) == 2
        up["ok"] = True
        await s.add_items([{"role": "user", "content": "four"}])
        assert sent == [["one"], ["two"], ["four"]] and s.writes.pending == [] and s.jobs == ["j1", "j2", "j3"]
        assert [c["content"] for c in await s.get_items()] == ["one", "two", "four"]  # type: ignore[index]

    # connection refused at add time, service back before close: close sends them
    async with AsyncMemoryClient("http://127.0.0.1:9", retry=fast, timeout=2) as nowhere:
        s2 = MemclusterSession("s2", nowhere, "a", "u")
        await s2.add_items([{"role": "user", "content": "kept"}])
        assert len(s2.writes.pending) == 1 and await s2.get_items() == [{"role": "user", "content": "kept"}]
        s2.close()  # one more try (fails again: kept, logged), then the history closes
        assert len(s2.writes.pending) == 1


def test_one_session_many_event_loops(memcluster: Served) -> None:
    """The SDK quickstart path: Runner.run_sync turn after turn (each its own event loop) on one session
    and one client; every turn is kept and archived."""
    mc = AsyncMemoryClient(memcluster.url)
    s = MemclusterSession("loops", mc, "oa-app", "lena", session_settings={"limit": 2})
    for n in range(3):
        asyncio.run(s.add_items([{"role": "user", "content": f"Lena turn {n} about kayaks."}]))
    assert [i["content"] for i in asyncio.run(s.get_items())] == [  # type: ignore[index]
        "Lena turn 1 about kayaks.", "Lena turn 2 about kayaks."]  # session_settings.limit
    assert len(asyncio.run(s.get_items(limit=10))) == 3 and s.writes.pending == [] and len(s.jobs) == 3

    async def hits() -> list[dict[str, Any]]:
        return list((await mc.recall("oa-app", "lena", "kayaks"))["hits"])

    assert len(asyncio.run(hits())) == 3
    asyncio.run(s.aclose())
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(s.add_items([{"role": "user", "content": "after close"}]))


async def test_memory_tools_sync_and_async(memcluster: Served) -> None:
    ctx = ToolContext(context=None, tool_name="memory_add", tool_call_id="t1", tool_arguments="{}")
    with MemoryClient(memcluster.url) as sync_mc:
        tools = memory_tools(sync_mc, "oa-tools", "dave")
        assert all(isinstance(t, FunctionTool) for t in tools)
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {s["function"]["name"] for s in sync_mc.tools("oa-tools", None)}
        out = json.loads(await by_name["memory_add"].on_invoke_tool(ctx, json.dumps({"memory": "Dave rows."})))
        assert out and [e.text for e in sync_mc.read("oa-tools", "dave")] == ["Dave rows."]
        assert by_name["memory_add"].params_json_schema["properties"]["memory"]
        sync_refused = json.loads(await by_name["memory_add"].on_invoke_tool(ctx, json.dumps({"memory": ""})))
        assert sync_refused["status"] == 422 and sync_refused["field"]
    async with AsyncMemoryClient(memcluster.url) as mc:
        atools = {t.name: t for t in await amemory_tools(mc, "oa-tools", "dave")}
        found = json.loads(await atools["memory_search"].on_invoke_tool(ctx, json.dumps({"query": "rowing"})))
        assert "Dave rows." in json.dumps(found)
        erin = {t.name: t for t in await amemory_tools(mc, "oa-tools", "erin")}
        assert "Dave rows." not in await erin["memory_search"].on_invoke_tool(ctx, json.dumps({"query": "rowing"}))
        # a failed call is a result the model reads, never an exception out of the run
        refused = json.loads(await atools["memory_add"].on_invoke_tool(ctx, json.dumps({"memory": ""})))
        assert refused["status"] == 422 and refused["error"] == "ValidationError" and refused["field"]
        garbled = json.loads(await atools["memory_add"].on_invoke_tool(ctx, "{not json"))
        assert garbled["field"] == "arguments" and "not JSON" in garbled["message"]
        listed = json.loads(await atools["memory_add"].on_invoke_tool(ctx, "[1]"))
        assert listed["field"] == "arguments"
        with pytest.raises(AuthError):  # memory_clear is not enabled in agentic mode
            await mc.call_tool("oa-tools", "dave", "memory_clear", {})


async def test_with_memory_prepends_the_preload_block(memcluster: Served, caplog: pytest.LogCaptureFixture) -> None:
    async with AsyncMemoryClient(memcluster.url) as mc:
        await mc.add("oa-pre", "fay", "Fay lives in Porto.")
        build = with_memory(mc, "oa-pre", "fay", "Be brief.")
        text = await build(RunContextWrapper(context={"message": "Where do I live?"}), None)  # type: ignore[arg-type]
        assert "Fay lives in Porto." in text and text.endswith("Be brief.")
        empty = with_memory(mc, "oa-pre", "nobody", "Be brief.")
        assert await empty(RunContextWrapper(context=None), None) == "Be brief."  # type: ignore[arg-type]
        off = with_memory(mc, "oa-pre", "fay", "Be brief.", budget=0)
        assert await off(RunContextWrapper(context="Where?"), None) == "Be brief."  # type: ignore[arg-type]

    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": "StoreError", "field": "store", "message": "down"})

    async with AsyncMemoryClient(transport=httpx.MockTransport(down), retry=Retry.never()) as broken:
        # memory down: the instructions without memory, no memory tools, a warning each; the run goes on
        with caplog.at_level(logging.WARNING, logger="memclient.guard"):
            assert await with_memory(broken, "a", "u", "Be brief.")(
                RunContextWrapper(context=None), None) == "Be brief."  # type: ignore[arg-type]
            assert await amemory_tools(broken, "a", "u") == []
        assert caplog.text.count("memory read failed") == 2
    with MemoryClient(transport=httpx.MockTransport(down), retry=Retry.never()) as sync_broken:
        assert memory_tools(sync_broken, "a", "u") == []
    # a tool call while memory is down (connection refused): the model reads the error
    async with AsyncMemoryClient("http://127.0.0.1:9", retry=Retry.never(), timeout=2) as nowhere:
        tool = _function_tools([{"function": {"name": "memory_search", "description": "d"}}],
                               lambda name, args: nowhere.call_tool("a", "u", name, args))[0]
        ctx = ToolContext(context=None, tool_name="memory_search", tool_call_id="t", tool_arguments="{}")
        out = json.loads(await tool.on_invoke_tool(ctx, '{"query": "x"}'))
        assert out["error"] and out["status"] is None and out["message"]


async def _done(mc: AsyncMemoryClient, job_id: str) -> None:
    for _ in range(200):
        if (await mc.job(job_id)).finished:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


async def test_pop_and_clear_remove_archived_turns_and_their_memories(memcluster: Served) -> None:
    async with AsyncMemoryClient(memcluster.url) as mc:
        s = MemclusterSession("sess-pop", mc, "oa-app", "dora")
        await s.add_items([{"role": "user", "content": "My dog is called Pepper."},
                           {"role": "assistant", "content": "Pepper is a fine name for a dog."}])
        await s.add_items([{"type": "function_call_output", "call_id": "c9", "output": "{}"}])
        await _done(mc, s.jobs[0])
        texts = {e.text for e in await mc.read("oa-app", "dora")}
        assert {"My dog is called Pepper.", "Pepper is a fine name for a dog."} <= {t.split(": ", 1)[-1] for t in texts}
        # popping a tool item touches nothing archived
        assert (await s.pop_item())["type"] == "function_call_output"  # type: ignore[index]
        assert len((await mc.recall("oa-app", "dora", "Pepper"))["hits"]) == 2
        # popping the assistant message removes its turn and the memory made only from it
        assert (await s.pop_item())["role"] == "assistant"  # type: ignore[index]
        hits = (await mc.recall("oa-app", "dora", "Pepper"))["hits"]
        assert [h["role"] for h in hits] == ["user"]
        left = [e.text for e in await mc.read("oa-app", "dora")]
        assert not any("fine name" in t for t in left) and any("called Pepper" in t for t in left)
        # clearing removes the rest of the session's turns and memories
        await s.clear_session()
        assert (await mc.recall("oa-app", "dora", "Pepper"))["hits"] == []
        assert not any("Pepper" in e.text for e in await mc.read("oa-app", "dora"))
        assert (await mc.delete_session("oa-app", "dora", "sess-pop"))["events"] == 0  # idempotent


def test_turn_routes_over_http(memcluster: Served) -> None:
    with MemoryClient(memcluster.url) as mc:
        job = mc.ingest("oa-app", "erin", "s-a", [{"id": "t1", "role": "user", "content": "I play the cello."},
                                                  {"id": "t2", "role": "user", "content": "I live in Ghent."}],
                        wait=10)
        assert job.finished
        mc.add("oa-app", "erin", "Erin plays the cello and lives in Ghent", provenance=["t1", "t2"])
        with pytest.raises(NotFound) as info:
            mc.delete_turn("oa-app", "erin", "s-a", "nope")
        assert info.value.status == 404 and info.value.field == "event_id"
        with pytest.raises(NotFound):
            mc.delete_turn("oa-app", "erin", "other-session", "t1")  # the turn is of s-a only
        assert mc.delete_turn("oa-app", "erin", "s-a", "t1") == {"session": "s-a", "events": 1, "entries": 1}
        left = [e.text for e in mc.read("oa-app", "erin")]
        assert any("cello and lives" in t for t in left)  # t2 is left: the two-turn memory stays
        assert not any(t.endswith("I play the cello.") for t in left)
        assert mc.delete_session("oa-app", "erin", "s-a") == {"session": "s-a", "events": 1, "entries": 2}
        assert mc.read("oa-app", "erin") == []
    r = httpx.delete(f"{memcluster.url}/v1/apps/oa-app/users/erin/sessions/%20bad%20")
    assert r.status_code == 422 and r.json()["field"] == "session"
