"""Mem0's ``add(infer=True)`` with a configured extractor: the real `mem0ai` client, the ingest path and
the scripted OpenAI-compatible model (the extracted memory, not the turn, is what gets stored)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from memclient import MemoryClient as Memclient
from testkit.scripted_llm import Reply, ScriptedLLM
from tests.auto_memory import remember_tokens

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="mem0-"))

pytestmark = pytest.mark.ray

KEYS = {"app1": "mem0-infer-key-0123456789"}


@pytest.fixture(scope="module")
def setup(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from tests.serve_apps.protocol_cluster import deployed

    def answer(request: dict[str, Any]) -> Reply:
        return Reply(tool_calls=tuple(remember_tokens(request)))

    with ScriptedLLM([answer] * 20) as llm, deployed(
        serve_port, tmp_path_factory.mktemp("mem0-infer"), name="memmem0x", prefix="/m0x", keys=KEYS,
        extractor={"base_url": llm.base_url, "model": "scripted", "policy": "append_only", "job_timeout_s": 20},
    ) as base:
        yield {"base": base, "llm": llm}


def test_infer_true_runs_the_apps_extractor(setup: dict[str, Any]) -> None:
    from mem0 import MemoryClient

    base = setup["base"]
    c = MemoryClient(api_key=KEYS["app1"], host=f"{base}/mem0")
    out = c.add([{"role": "user", "content": "my lucky number is token-7"},
                 {"role": "assistant", "content": "I will remember that."}],
                user_id="hal", agent_id="luck-bot", run_id="chat-1")
    assert [(r["event"], r["memory"]) for r in out["results"]] == [("ADD", "The user's lucky token-7 is remembered")]
    (entry,) = Memclient(base, api_key=KEYS["app1"], timeout=30).read("app1", "hal", 10)
    assert entry.text == "The user's lucky token-7 is remembered"
    assert (entry.metadata["mem0_agent_id"], entry.metadata["mem0_run_id"]) == ("luck-bot", "chat-1")
    got = c.get(out["results"][0]["id"])
    assert (got["agent_id"], got["run_id"], got["categories"]) == ("luck-bot", "chat-1", ["luck"])
    found = c.search("lucky number", filters={"AND": [{"user_id": "hal"}, {"run_id": "chat-1"}]})
    assert [m["memory"] for m in found["results"]] == ["The user's lucky token-7 is remembered"]
