"""The scripted OpenAI-compatible server streams when asked (trpc-agent's LlmAgent always streams):
the real ``openai`` client reassembles the content and the tool calls from the chunks."""

from __future__ import annotations

import json

import openai

from testkit.scripted_llm import ScriptedLLM, tool_call


def test_stream_carries_content_and_tool_calls() -> None:
    with ScriptedLLM(["hello there", [tool_call("load_memory", {"query": "x"}, id="c1")]]) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True) if c.choices)
        assert text == "hello there"
        calls, finish = [], None
        for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                    stream=True):
            if chunk.choices:
                calls += chunk.choices[0].delta.tool_calls or []
                finish = chunk.choices[0].finish_reason or finish
        assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == \
            [("c1", "load_memory", {"query": "x"})]
        assert finish == "tool_calls" and all(r["stream"] for r in llm.requests)
