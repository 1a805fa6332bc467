"""The OpenAI Agents SDK adapter against a live memcluster: the SDK's Runner with the scripted
OpenAI-compatible model over two sessions and two users; MemclusterSession, memory_tools and
with_memory one by one (sync and async clients), error mapping."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from agents import FunctionTool, RunContextWrapper, SQLiteSession, set_tracing_disabled
from agents.memory import Session
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

from examples.openai_agents_memory import turn
from memclient import AsyncMemoryClient, AuthError, InvalidRequest, MemoryClient, NotFound, Unavailable
from memclient.integrations.openai_agents import (
    MemclusterSession,
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


async def test_session_error_raises_and_keeps_nothing() -> None:
    def bad(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": "ValidationError", "field": "events.0.content", "message": "bad"})

    async with AsyncMemoryClient(transport=httpx.MockTransport(bad)) as mc:
        s = MemclusterSession("s", mc, "a", "u")
        with pytest.raises(InvalidRequest) as info:
            await s.add_items([{"role": "user", "content": "x"}])
        assert info.value.field == "events.0.content"
        assert await s.get_items() == []


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
    async with AsyncMemoryClient(memcluster.url) as mc:
        atools = {t.name: t for t in await amemory_tools(mc, "oa-tools", "dave")}
        found = json.loads(await atools["memory_search"].on_invoke_tool(ctx, json.dumps({"query": "rowing"})))
        assert "Dave rows." in json.dumps(found)
        erin = {t.name: t for t in await amemory_tools(mc, "oa-tools", "erin")}
        assert "Dave rows." not in await erin["memory_search"].on_invoke_tool(ctx, json.dumps({"query": "rowing"}))
        with pytest.raises(InvalidRequest):
            await atools["memory_add"].on_invoke_tool(ctx, json.dumps({"memory": ""}))
        with pytest.raises(AuthError):  # memory_clear is not enabled in agentic mode
            await mc.call_tool("oa-tools", "dave", "memory_clear", {})


async def test_with_memory_prepends_the_preload_block(memcluster: Served) -> None:
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

    async with AsyncMemoryClient(transport=httpx.MockTransport(down)) as broken:
        with pytest.raises(Unavailable):
            await with_memory(broken, "a", "u")(RunContextWrapper(context=None), None)  # type: ignore[arg-type]
        with pytest.raises(Unavailable):
            await amemory_tools(broken, "a", "u")


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
