"""The example agent's tool loop and preload, driven through the real ``openai`` client by a scripted
OpenAI-compatible server, against the real HTTP app (uvicorn over LocalShardBackend). Auto memory
(the agent's ingest of each turn) runs against a Ray cluster in ``test_agent_auto_memory.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from examples.agent import AgentConfig, MemoryAgent, main
from memclient import MemoryClient
from testkit.scripted_llm import ScriptedLLM, iter_tool_messages, messages_text, tool_call
from tests.serve_apps.conftest import Served, serve_local

APP, KEY = "agent-app", "agent-key"
RULE = "The user never drinks coffee after 2pm."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder

    data = tmp_path_factory.mktemp("agent")
    with serve_local(data, HashingEmbedder(dim=256), settings=Settings(data_dir=data, shards=2,
                                                                       api_keys={APP: KEY})) as served:
        yield served


@pytest.fixture
def memory(server: Served) -> Iterator[MemoryClient]:
    with MemoryClient(server.url, api_key=KEY) as mc:
        yield mc


def _system(request: dict[str, Any]) -> str:
    return messages_text(request, "system")


def _tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def _tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in iter_tool_messages(request)]


def test_two_sessions_remember_a_rule(memory: MemoryClient) -> None:
    script = [
        tool_call("memory_add", {"memory": RULE, "topics": ["rules", "coffee"]}, id="call_add"),
        "Noted: no coffee after 2pm.",
        tool_call("memory_search", {"query": "coffee rule afternoon"}, id="call_search"),
        "Better not: you never drink coffee after 2pm. How about a herbal tea?",
    ]
    out: list[str] = []
    with ScriptedLLM(script) as llm:
        agent = MemoryAgent(memory, openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0),
                            AgentConfig(app=APP, user="alice", session="session-a", model="scripted",
                                        ingest=False), out.append)
        agent.run(["Please remember: I never drink coffee after 2pm.", "/new",
                   "Can I have an espresso at 4pm?", "/memory", "/exit", "this line is never read"])
        requests = llm.requests
        assert llm.remaining == 0

    assert len(requests) == 4
    first, after_add, second, after_search = requests
    # session A: nothing to preload yet; the exposed agentic tools are offered
    assert first["model"] == "scripted"
    assert _tool_names(first) == ["memory_add", "memory_update", "memory_search", "memory_load"]
    assert RULE not in _system(first) and "<memories>" not in _system(first)
    added = _tool_results(after_add)
    assert added[0]["status"] == "ok" and added[0]["memory"] == RULE
    assert iter_tool_messages(after_add)[0]["tool_call_id"] == "call_add"

    # session B: a fresh conversation; preload put the rule into the system prompt
    assert RULE in _system(second) and "<memories>" in _system(second)
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    assert "Please remember" not in messages_text(second)
    found = _tool_results(after_search)
    assert found[0]["count"] == 1 and found[0]["results"][0]["memory"] == RULE

    assert agent.session != "session-a"
    text = "\n".join(out)
    assert "Assistant: Noted: no coffee after 2pm." in text
    assert "Assistant: Better not: you never drink coffee after 2pm." in text
    assert "New session:" in text and "previous: session-a" in text
    memory_lines = [line for line in out if RULE in line and line.strip().startswith("- ")]
    assert len(memory_lines) == 1 and "[rules, coffee]" in memory_lines[0]  # /memory listed it
    assert out[-1] == "Goodbye!" and "this line is never read" not in text
    assert [e.text for e in memory.read(APP, "alice")] == [RULE]


def test_inject_user_and_tool_errors(memory: MemoryClient) -> None:
    memory.add(APP, "bob", "Bob is vegetarian.")
    script = [
        [tool_call("memory_delete", {"memory_id": "x"}), tool_call("memory_add", "{not json")],
        "Here is a vegetarian recipe.",
    ]
    out: list[str] = []
    with ScriptedLLM(script) as llm:
        agent = MemoryAgent(memory, openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0),
                            AgentConfig(app=APP, user="bob", model="m", inject="user", budget=5, ingest=False),
                            out.append)
        agent.run(["Suggest a dinner recipe."])
        first, second = llm.requests

    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "user"]
    assert "Bob is vegetarian." in first["messages"][1]["content"]
    assert "Bob is vegetarian." not in _system(first)
    assert first["messages"][2]["content"] == "Suggest a dinner recipe."
    denied, malformed = _tool_results(second)
    assert denied["error"] == "PermissionDeniedError" and denied["field"] == "name"
    assert malformed["error"] == "InvalidArguments"
    assert out[-2] == "Assistant: Here is a vegetarian recipe." and out[-1] == "Goodbye!"
    assert [e.text for e in memory.read(APP, "bob")] == ["Bob is vegetarian."]


def test_tool_rounds_are_bounded(memory: MemoryClient) -> None:
    loop = tool_call("memory_load", {"limit": 1})
    with ScriptedLLM([loop, loop, loop]) as llm:
        agent = MemoryAgent(memory, openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0),
                            AgentConfig(app=APP, user="carol", budget=0, max_tool_rounds=2), lambda _: None)
        answer = agent.turn("load my memories forever")
        assert "no answer after 2 rounds" in answer
        assert [bool(r.get("tools")) for r in llm.requests] == [True, True, False]  # the last round offers none


def test_main_reads_the_environment(server: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    out: list[str] = []
    with ScriptedLLM(["Hello Dave."]) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("OPENAI_MODEL", "env-model")
        monkeypatch.setenv("MEMCLUSTER_URL", server.url)
        monkeypatch.setenv("MEMCLUSTER_API_KEY", KEY)
        argv = ["--app", APP, "--user", "dave", "--session", "s1", "--budget", "-1"]
        assert main(argv, ["Hi!", "/memory"], out.append) == 0
        (request,) = llm.requests
    assert request["model"] == "env-model"
    assert "Assistant: Hello Dave." in out and out[-1] == "Goodbye!"
    # the turn went to ingest; /memory waited for the job (verbatim: no model on this server)
    assert "(memory: extraction done, 2 applied)" in out
    assert any(line.strip().startswith("- ") and "User: Hi!" in line for line in out), out


def test_a_partial_job_reports_what_failed(memory: MemoryClient) -> None:
    from memclient import Job

    out: list[str] = []
    agent = MemoryAgent(memory, openai.OpenAI(base_url="http://127.0.0.1:9", api_key="x"),
                        AgentConfig(app=APP, user="erin"), out.append)
    agent.report(Job.from_json({"job_id": "j1", "status": "partial", "counts": {"applied": 1, "failed": 1},
                                "operations": [{"index": 0, "type": "add", "status": "applied"},
                                               {"index": 1, "type": "add", "status": "failed",
                                                "error": "StoreError: disk full"}]}))
    assert out == ["(memory: extraction partial, 1 applied, 1 failed: add: StoreError: disk full)"]
