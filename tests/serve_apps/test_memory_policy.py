"""The server decides what an agent may do (seeds 000/001: the mode follows whether an extractor model
is configured; enabled ≠ exposed): per app, ``GET /tools`` lists exactly the exposed tools of the app's
mode and every other tool call is 403, whatever mode the request names. Two apps with different
policies side by side; ``memory: off`` and ``archive_only`` apps; an app pinned to the verbatim
extractor. Real HTTP (uvicorn + LocalShardBackend), the scripted model as the extractor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from memcore.vocabulary import ALL_TOOLS
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, tool_call
from tests.serve_apps.conftest import Served

ARGS: dict[str, dict[str, Any]] = {
    "memory_add": {"memory": "Likes tea"}, "memory_update": {"memory_id": "x", "memory": "y"},
    "memory_search": {"query": "tea"}, "memory_load": {"limit": 3}, "memory_delete": {"memory_id": "x"},
    "memory_clear": {},
}


def names(c: httpx.Client, app: str, **params: str) -> list[str]:
    r = c.get(f"/v1/apps/{app}/tools", params=params)
    assert r.status_code == 200, r.text
    return [t["function"]["name"] for t in r.json()["tools"]]


def remember(request: dict[str, Any]) -> Reply:
    convo = messages_text(request, "user").split("New conversation", 1)[-1]
    return Reply(tool_calls=(tool_call("memory_add", {"memory": "The user drinks tea"}),) if "tea" in convo else ())


@pytest.fixture
def served(make_server: Callable[..., Served]) -> Any:
    with ScriptedLLM([remember] * 20) as llm:
        yield make_server(
            extractor={"base_url": llm.base_url, "model": "scripted"},
            memory={"apps": {
                "agentic-app": {"tool_mode": "agentic"},
                "exposing-app": {"tools": {"auto_exposed": ["memory_add"], "enabled": {"memory_load": True}}},
                "verbatim-app": {"extractor": "verbatim"},
                "archive-app": {"memory": "archive_only"},
                "off-app": {"memory": "off"},
            }}), llm


@pytest.mark.parametrize(("app", "mode", "exposed"), [
    ("auto-app", "auto", ["memory_search"]),  # an extractor model is configured: auto is the default
    ("agentic-app", "agentic", ["memory_add", "memory_update", "memory_search", "memory_load"]),
    ("exposing-app", "auto", ["memory_add", "memory_search", "memory_load"]),
    ("verbatim-app", "agentic", ["memory_add", "memory_update", "memory_search", "memory_load"]),
    ("off-app", "auto", []),
])
def test_listing_is_the_exposed_set_and_everything_else_is_403(served: Any, app: str, mode: str,
                                                               exposed: list[str]) -> None:
    server, _ = served
    other = "agentic" if mode == "auto" else "auto"
    with server.client() as c:
        r = c.get(f"/v1/apps/{app}/tools")
        assert r.json()["mode"] == mode and names(c, app) == exposed == names(c, app, mode=mode)
        denied = c.get(f"/v1/apps/{app}/tools", params={"mode": other})
        assert denied.status_code == 403 and denied.json()["field"] == "mode"
        for tool in ALL_TOOLS:
            url = f"/v1/apps/{app}/users/u1/tools/{tool}"
            for body in ({"arguments": ARGS[tool]}, {"arguments": ARGS[tool], "mode": other}):
                r = c.post(url, json=body)
                if tool in exposed and "mode" not in body:
                    assert r.status_code in (200, 404), (tool, r.text)  # 404: memory_update of an unknown id
                else:
                    assert r.status_code == 403, (tool, body, r.text)
                    assert r.json()["error"] == "PermissionDeniedError"


def test_two_apps_side_by_side_extract_with_their_own_extractor(served: Any) -> None:
    server, llm = served
    chat = {"events": [{"role": "user", "content": "I drink tea every morning"},
                       {"role": "assistant", "content": "Tea it is."}]}
    with server.client() as c:
        auto = c.post("/v1/apps/auto-app/users/u2/sessions/s1/events", json=chat, params={"wait": 10}).json()
        verbatim = c.post("/v1/apps/verbatim-app/users/u2/sessions/s1/events", json=chat, params={"wait": 10}).json()
        assert auto["status"] == verbatim["status"] == "done"
        assert [e["text"] for e in c.get("/v1/apps/auto-app/users/u2/memories").json()["entries"]] == [
            "The user drinks tea"]
        assert sorted(e["text"] for e in c.get("/v1/apps/verbatim-app/users/u2/memories").json()["entries"]) == [
            "Assistant: Tea it is.", "User: I drink tea every morning"]
    assert len(llm.requests) == 1  # the verbatim app's turns never reached the model


def test_memory_off_stores_nothing_and_reads_answer_empty(served: Any) -> None:
    server, llm = served
    base = "/v1/apps/off-app/users/u3"
    with server.client() as c:
        r = c.post(f"{base}/sessions/s1/events", json={"events": [{"role": "user", "content": "I drink tea"}]})
        assert r.status_code == 200 and r.json()["status"] == "skipped" and "off" in r.json()["reason"]
        assert c.get(f"/v1/jobs/{r.json()['job_id']}").status_code == 404  # not even the job is stored
        assert c.post(f"{base}/sessions/recall", json={"query": "tea"}).json()["hits"] == []
        add = c.post(f"{base}/memories", json={"text": "x"})
        assert add.status_code == 403 and add.json()["field"] == "app"
        assert c.get(f"{base}/memories").json()["entries"] == []
        assert c.post(f"{base}/memories/search", json={"query": "tea"}).json()["hits"] == []
        pre = c.post(f"{base}/preload", json={"budget": 10, "message": "tea?"}).json()
        assert pre["entries"] == [] and pre["text"] == ""
        assert c.delete(f"{base}/memories").status_code == 204  # deleting always works
    assert llm.requests == []


def test_archive_only_archives_for_recall_and_extracts_nothing(served: Any) -> None:
    server, llm = served
    base = "/v1/apps/archive-app/users/u4"
    with server.client() as c:
        r = c.post(f"{base}/sessions/s1/events", json={"events": [{"role": "user", "content": "I drink tea"}]})
        assert r.status_code == 200 and r.json()["status"] == "skipped" and "archive_only" in r.json()["reason"]
        hits = c.post(f"{base}/sessions/recall", json={"query": "tea", "session": "other"}).json()["hits"]
        assert [h["content"] for h in hits] == ["I drink tea"]
        assert c.get(f"{base}/memories").json()["entries"] == []
    assert llm.requests == []
