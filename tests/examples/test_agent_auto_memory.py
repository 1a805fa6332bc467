"""The example agent with auto memory, on a local Ray cluster (Serve ingress + shard actors): two
sessions, the scripted OpenAI-compatible model as the agent's chat model and, on a second scripted
server, as the service's extractor. Session 1 states a preference; session 2 (after ``/new``) gets it
back through preload and the answer uses it. With ``--tool-mode auto`` the chat model has no write
tool and writes nothing, yet session 2 still finds the preference: the agent's ingest made it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from examples.agent import AgentConfig, MemoryAgent
from memclient import MemoryClient
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, tool_call
from tests.serve_apps.ray_app import serve_memcluster

pytestmark = pytest.mark.ray

KEYS = {"agentic": "agent-agentic-key-0123456789", "auto": "agent-auto-key-0123456789"}
NAMESPACE, PREFIX = "memcluster-agent-test", "/agent"
PREFERENCE = "The user takes their coffee with oat milk."
SAID = "I always take my coffee with oat milk."


def extract(request: dict[str, Any]) -> Reply:
    """The extractor: one memory_add when the new conversation states the preference."""
    conversation = messages_text(request, "user").split("New conversation", 1)[-1]
    if "oat milk" in conversation and "User:" in conversation:
        return Reply(tool_calls=(tool_call("memory_add", {"memory": PREFERENCE, "topics": ["coffee"]}),))
    return Reply(content="nothing to remember")


@pytest.fixture(scope="module")
def cluster(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with ScriptedLLM([extract] * 50) as extractor:
        settings = {
            "data_dir": str(tmp_path_factory.mktemp("agent-auto")), "shards": 2, "namespace": NAMESPACE,
            "embedder": {"kind": "hashing", "dim": 256}, "api_keys": KEYS,
            # the extractor is a model, so apps default to auto mode; one app is set to agentic
            "memory": {"apps": {"agentic": {"tool_mode": "agentic"}}},
            "extractor": {"base_url": extractor.base_url, "model": "scripted-extractor", "job_timeout_s": 20},
        }
        with serve_memcluster(serve_port, "memagent", PREFIX, settings) as base:
            yield {"base": base, "extractor": extractor}


def answer_from_memory(request: dict[str, Any]) -> str:
    system = messages_text(request, "system")
    return "A flat white with oat milk, as you like it." if "oat milk" in system else "A flat white."


@pytest.mark.parametrize("mode", ["agentic", "auto"])
def test_two_sessions_remember_a_preference(cluster: dict[str, Any], mode: str) -> None:
    user = f"zoe-{mode}"
    session_one: list[Any] = (
        [tool_call("memory_add", {"memory": PREFERENCE, "topics": ["coffee"]}), "Noted: oat milk."]
        if mode == "agentic" else ["Noted: oat milk it is."])
    out: list[str] = []
    app = mode  # the app's tool mode is the deployment's: the agent names none
    with MemoryClient(cluster["base"], api_key=KEYS[app], timeout=60) as memory, \
            ScriptedLLM([*session_one, answer_from_memory]) as chat:
        agent = MemoryAgent(memory, openai.OpenAI(base_url=chat.base_url, api_key="test", max_retries=0),
                            AgentConfig(app=app, user=user, model="scripted"), out.append)
        agent.run([SAID, "/new", "What should I order at the cafe?", "/memory", "/exit"])
        requests = chat.requests
        assert chat.remaining == 0
        entries = memory.read(app, user)
        other = memory.read(app, f"someone-else-{mode}")

    offered = {t["function"]["name"] for r in requests for t in r.get("tools", [])}
    if mode == "auto":
        assert offered == {"memory_search"}  # no write tool is exposed: nothing the model does writes
        assert all(not r.get("tools") or "memory_add" not in str(r["tools"]) for r in requests)
    else:
        assert {"memory_add", "memory_search"} <= offered
    last = requests[-1]
    assert PREFERENCE in messages_text(last, "system")  # preload brought it into session 2
    assert [m["role"] for m in last["messages"]] == ["system", "user"]  # a new session: no old turns
    assert "Assistant: A flat white with oat milk, as you like it." in out
    assert any(line.startswith("(memory: extraction done") for line in out), out
    assert PREFERENCE in [e.text for e in entries]
    assert other == []
    sources = {e.source for e in entries if e.text == PREFERENCE}
    assert sources == {"user"}
