"""A LangGraph chat graph whose long-term memory is memcluster (``memcluster-client[langgraph]``).

One node: it searches the user's memories (``store.search``) for the latest message, puts them in the
system prompt, calls any OpenAI-compatible chat model with a ``remember`` tool and, when the model
calls it, stores the fact (``store.put``). The conversation itself lives in LangGraph's checkpointer
(one ``thread_id`` per session); the memories outlive the thread. Memory never blocks the model
(:mod:`memclient.guard`): with memcluster down the node answers without memories and the fact is
not stored, each with a warning::

    OPENAI_BASE_URL=http://127.0.0.1:8001/v1 OPENAI_MODEL=qwen MEMCLUSTER_URL=http://127.0.0.1:8000 \\
        python examples/langgraph_memory.py alice "I am allergic to peanuts"
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any, TypedDict

import openai
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, SearchItem

from memclient.guard import read_or_sync, safe_tool
from memclient.integrations.langgraph import MemclusterStore

REMEMBER = {"type": "function", "function": {
    "name": "remember", "description": "Save a lasting fact about the user (one self-contained statement).",
    "parameters": {"type": "object", "properties": {"memory": {"type": "string"}}, "required": ["memory"]}}}


@safe_tool
def remember(store: BaseStore, namespace: tuple[str, ...], memory: str) -> str:
    """Store one fact of the user (a memory failure is returned, not raised)."""
    store.put(namespace, uuid.uuid4().hex, {"text": memory})
    return "stored"


class Context(TypedDict):
    user_id: str


def _role(message: Any) -> str:
    return {"human": "user", "ai": "assistant"}.get(message.type, message.type)


def build_graph(store: BaseStore, llm: openai.OpenAI, model: str) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph, compiled with ``store`` (long-term memory) and an in-memory checkpointer (the thread)."""

    def chat(state: MessagesState, runtime: Runtime[Context]) -> dict[str, Any]:
        assert runtime.store is not None
        namespace = (runtime.context["user_id"], "memories")
        question = str(state["messages"][-1].content)
        store = runtime.store
        nothing: list[SearchItem] = []
        found = read_or_sync("langgraph memories", lambda: store.search(namespace, query=question, limit=5), nothing)
        memories = "\n".join(f"- {item.value['text']}" for item in found) or "(none)"
        system = f"You are a helpful assistant. What you know about the user:\n{memories}"
        history = [{"role": _role(m), "content": str(m.content)} for m in state["messages"]]
        messages: list[Any] = [{"role": "system", "content": system}, *history]
        reply = llm.chat.completions.create(model=model, messages=messages, tools=[REMEMBER])  # type: ignore[list-item]
        message = reply.choices[0].message
        for call in message.tool_calls or []:
            fn = getattr(call, "function", None)
            if fn is not None and fn.name == "remember":
                remember(store, namespace, json.loads(fn.arguments)["memory"])
        return {"messages": [{"role": "assistant", "content": message.content or "Noted."}]}

    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def ask(graph: CompiledStateGraph[Any, Any, Any, Any], user: str, thread: str, text: str) -> str:
    """One turn of ``user`` in session ``thread``; returns the assistant's answer."""
    out = graph.invoke({"messages": [{"role": "user", "content": text}]},
                       {"configurable": {"thread_id": thread}}, context={"user_id": user})
    return str(out["messages"][-1].content)


def main(argv: list[str]) -> int:
    user, text = argv[0], " ".join(argv[1:])
    store = MemclusterStore.connect(os.environ.get("MEMCLUSTER_URL", "http://127.0.0.1:8000"),
                                    api_key=os.environ.get("MEMCLUSTER_API_KEY"), app="langgraph-demo")
    graph = build_graph(store, openai.OpenAI(), os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    print(ask(graph, user, uuid.uuid4().hex, text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
