"""Which namespace label is the memcluster user (``MemclusterStore(user_from=...)``): LangGraph's memory-guide
example (``("memories", user_id)``) runs unchanged in a compiled graph, the memories land in the real user
(REST sees them there, not under a user called ``memories``), and erasing that user removes them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError

from memclient import MemoryClient
from memclient.integrations.langgraph import MemclusterStore
from testkit.scripted_llm import ScriptedLLM
from tests.serve_apps.conftest import Served

APP = "lg-users"


@pytest.fixture
def store(memcluster: Served) -> Iterator[MemclusterStore]:
    s = MemclusterStore.connect(memcluster.url, app=APP)
    yield s
    s.close()


def _guide_graph(store: BaseStore, llm: openai.OpenAI) -> Any:
    """The node of LangGraph's memory guide ("Add long-term memory"), with the model called through an
    OpenAI-compatible client instead of a chat-model object."""

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user_id = config["configurable"]["user_id"]
        namespace = ("memories", user_id)
        memories = store.search(namespace, query=str(state["messages"][-1].content))
        info = "\n".join([d.value["data"] for d in memories])
        system_msg = f"You are a helpful assistant talking to the user. User info: {info}"
        last_message = state["messages"][-1]
        if "remember" in str(last_message.content).lower():
            memory = "User name is Bob"
            store.put(namespace, str(uuid.uuid4()), {"data": memory})
        history = [{"role": "user" if m.type == "human" else "assistant", "content": str(m.content)}
                   for m in state["messages"]]
        response = llm.chat.completions.create(model="scripted", messages=[
            {"role": "system", "content": system_msg}, *history])  # type: ignore[list-item]
        return {"messages": [{"role": "assistant", "content": response.choices[0].message.content or ""}]}

    builder = StateGraph(MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "call_model")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def test_the_memory_guide_example_runs_unchanged(memcluster: Served, store: MemclusterStore) -> None:
    with ScriptedLLM(["Hi Bob!", "Your name is Bob."]) as llm:
        graph = _guide_graph(store, openai.OpenAI(base_url=llm.base_url, api_key="test"))
        config: Any = {"configurable": {"thread_id": "1", "user_id": "bob-1"}}
        graph.invoke({"messages": [{"role": "user", "content": "Hi! Remember: my name is Bob"}]}, config)
        other: Any = {"configurable": {"thread_id": "2", "user_id": "bob-1"}}
        answer = graph.invoke({"messages": [{"role": "user", "content": "what is my name?"}]}, other)
        assert answer["messages"][-1].content == "Your name is Bob."
        assert "User info: User name is Bob" in str(llm.requests[1]["messages"][0]["content"])  # a new thread
    (item,) = store.search(("memories", "bob-1"))
    assert (item.namespace, item.value) == (("memories", "bob-1"), {"data": "User name is Bob"})
    with MemoryClient(memcluster.url) as mc:
        assert [e.metadata["value"] for e in mc.read(APP, "bob-1")] == [{"data": "User name is Bob"}]
        assert mc.read(APP, "memories") == []  # not one user called "memories" for everyone
        assert mc.forget(APP, "bob-1")["entries"] == 1  # erasing the real user removes the items
    assert store.search(("memories", "bob-1")) == []


def test_both_conventions_name_the_user_and_stay_apart(memcluster: Served, store: MemclusterStore) -> None:
    store.put(("memories", "cy"), "k", {"text": "guide convention"})
    store.put(("cy", "memories"), "k", {"text": "persistence convention"})
    store.put(("cy",), "k", {"text": "the user's own"})
    assert store.get(("memories", "cy"), "k").value["text"] == "guide convention"  # type: ignore[union-attr]
    assert store.get(("cy", "memories"), "k").value["text"] == "persistence convention"  # type: ignore[union-attr]
    assert {i.namespace for i in store.search(("cy",))} == {("cy",), ("cy", "memories")}  # a prefix is a prefix
    assert [i.namespace for i in store.search(("memories", "cy"))] == [("memories", "cy")]
    assert store.list_namespaces(prefix=("memories", "cy")) == [("memories", "cy")]
    with MemoryClient(memcluster.url) as mc:
        assert len(mc.read(APP, "cy")) == 3
    with pytest.raises(InvalidNamespaceError, match="names no user"):
        store.search(("memories",))
    store.delete(("memories", "cy"), "k")
    assert store.get(("memories", "cy"), "k") is None and store.get(("cy", "memories"), "k") is not None


def test_user_from_picks_the_label(memcluster: Served) -> None:
    fixed = MemclusterStore(MemoryClient(memcluster.url), app=APP, user_from=1)
    free = MemclusterStore(MemoryClient(memcluster.url), user_from=0)
    try:
        fixed.put(("team-a", "memories"), "k", {"text": "a user called memories"})
        with MemoryClient(memcluster.url) as mc:
            assert [e.metadata["value"]["text"] for e in mc.read(APP, "memories")] == ["a user called memories"]
        assert free.get((APP, "memories", "team-a"), "k") is None  # another namespace
        free.put((APP, "dee", "profile"), "k", {"text": "dee's profile"})
        with MemoryClient(memcluster.url) as mc:
            assert [e.metadata["value"]["text"] for e in mc.read(APP, "dee")] == ["dee's profile"]
        with pytest.raises(InvalidNamespaceError, match="user_from=1"):
            fixed.get(("team-a",), "k")
        with pytest.raises(ValueError, match="user_from"):
            MemclusterStore(MemoryClient(memcluster.url), user_from=-1)
    finally:
        fixed.close()
        free.close()
