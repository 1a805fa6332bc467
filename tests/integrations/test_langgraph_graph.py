"""A LangGraph graph with MemclusterStore as its store and the scripted OpenAI-compatible model:
session 1 (one thread) states a fact, the model stores it; session 2 is a new thread and the answer
uses the fact found through the store; a second user sees nothing. Here on the in-process server;
tests/serve_apps/test_langgraph_cluster.py runs the same on the Ray cluster."""

from __future__ import annotations

import logging
from typing import Any

import openai
import pytest

from examples.langgraph_memory import ask, build_graph
from memclient import MemoryClient, Retry
from memclient.integrations.langgraph import MemclusterStore
from testkit.scripted_llm import ScriptedLLM, messages_text, tool_call
from tests.serve_apps.conftest import Served

FACT = "The user is allergic to peanuts."


def answer(request: dict[str, Any]) -> str:
    return "Skip the peanut bars." if "peanuts" in messages_text(request, "system") else "Any snack is fine."


def two_sessions(base_url: str, api_key: str | None) -> None:
    script = [[tool_call("remember", {"memory": FACT})], answer, answer]
    store = MemclusterStore.connect(base_url, api_key=api_key, app="lg-graph")
    with ScriptedLLM(script) as llm:
        graph = build_graph(store, openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0), "scripted")
        assert ask(graph, "alice", "session-1", "Remember: I'm allergic to peanuts.") == "Noted."
        assert ask(graph, "alice", "session-2", "Which snack should I skip?") == "Skip the peanut bars."
        # session 2 is a new thread: the model saw only the new question plus the memory block
        second = llm.requests[1]
        assert "allergic to peanuts" not in messages_text(second, "user")
        assert FACT in messages_text(second, "system")
        assert ask(graph, "bob", "session-3", "Which snack should I skip?") == "Any snack is fine."
        assert "peanuts" not in messages_text(llm.requests[2])
    with MemoryClient(base_url, api_key=api_key) as mc:
        assert [e.metadata["value"] for e in mc.read("lg-graph", "alice")] == [{"text": FACT}]
        assert mc.read("lg-graph", "bob") == []
    store.close()


def test_two_sessions_local(memcluster: Served) -> None:
    two_sessions(memcluster.url, None)


def test_memory_down_never_blocks_the_graph(caplog: pytest.LogCaptureFixture) -> None:
    """memcluster unreachable: the node answers without memories, the model's fact is not stored, a warning
    for each; the graph run itself does not fail."""
    nowhere = "http://127.0.0.1:9"
    store = MemclusterStore(MemoryClient(nowhere, retry=Retry.never(), timeout=2), app="lg-graph")
    with ScriptedLLM([[tool_call("remember", {"memory": FACT})]]) as llm:
        graph = build_graph(store, openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0), "scripted")
        with caplog.at_level(logging.WARNING, logger="memclient.guard"):
            assert ask(graph, "alice", "session-x", "Remember: I'm allergic to peanuts.") == "Noted."
        assert "(none)" in messages_text(llm.requests[0], "system")
    assert "memory read failed (langgraph memories)" in caplog.text and "memory tool remember failed" in caplog.text
    store.close()
