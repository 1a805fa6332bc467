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


# ------------------------------------------------------------------ memory: off on every route
GATED = "gated-app"
SECRET = "zebra"
"""A word in every stored text of the gated app: no answer of an off app may contain it."""
_U = "/v1/apps/{app}/users/{user}"
_M0 = "/mem0"
#: Every route of the HTTP app (OpenAPI), classified: ``read`` answers 200 (or 404) without any stored text,
#: ``write`` is refused with 403 (or 404 where the route reads the target first) and writes nothing,
#: ``skip`` answers a skipped job, ``erase`` always works, ``other`` serves no app's memory.
ROUTES: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("POST", f"{_U}/memories"): ("write", {"json": {"text": f"{SECRET} new"}}),
    ("GET", f"{_U}/memories"): ("read", {}),
    ("DELETE", f"{_U}/memories"): ("erase", {}),
    ("GET", f"{_U}/memories/{{memory_id}}"): ("read", {}),
    ("PATCH", f"{_U}/memories/{{memory_id}}"): ("write", {"json": {"text": f"{SECRET} patched"}}),
    ("DELETE", f"{_U}/memories/{{memory_id}}"): ("erase", {}),
    ("POST", f"{_U}/memories/search"): ("read", {"json": {"query": f"{SECRET} secret"}}),
    ("POST", f"{_U}/preload"): ("read", {"json": {"budget": -1, "message": SECRET}}),
    ("POST", f"{_U}/sessions/recall"): ("read", {"json": {"query": SECRET, "session": "other"}}),
    ("POST", f"{_U}/sessions/{{session}}/events"): (
        "skip", {"json": {"events": [{"role": "user", "content": f"{SECRET} again"}]}, "params": {"wait": 5}}),
    ("DELETE", _U): ("erase", {}),
    ("DELETE", f"{_U}/sessions/{{session}}"): ("erase", {}),
    ("DELETE", f"{_U}/sessions/{{session}}/events/{{event_id}}"): ("erase", {}),
    ("GET", "/v1/apps/{app}/tools"): ("read", {}),
    ("POST", f"{_U}/tools/{{name}}"): ("write", {}),  # every tool, see below
    ("GET", "/v1/apps/{app}/export"): ("read", {}),
    ("POST", "/v1/apps/{app}/import"): ("write", {}),  # the export taken while memory was on
    ("GET", "/v1/jobs/{job_id}"): ("read", {}),
    ("POST", "/v1/admin/compact"): ("other", {}),
    ("GET", "/healthz"): ("other", {}),
    ("GET", "/readyz"): ("other", {}),
    ("POST", f"{_U}/graph/facts"): ("write", {"json": {"subject": "Alice", "predicate": "lives_in",
                                                        "object": f"{SECRET} city"}}),
    ("POST", f"{_U}/graph/facts/invalidate"): ("write", {"json": {"subject": "Alice", "predicate": "lives_in",
                                                                   "object": "Paris"}}),
    ("DELETE", f"{_U}/graph/facts/{{fact_id}}"): ("erase", {}),
    ("GET", f"{_U}/graph/facts"): ("read", {"params": {"entity": "Alice"}}),
    ("GET", f"{_U}/graph/timeline"): ("read", {"params": {"entity": "Alice"}}),
    ("GET", f"{_U}/graph/neighbourhood"): ("read", {"params": {"entity": "Alice"}}),
    ("PUT", f"{_U}/graph/entities"): ("write", {"json": {"name": f"{SECRET} entity"}}),
    ("GET", f"{_U}/graph/entities/{{name}}"): ("read", {}),
    ("POST", f"{_U}/diary"): ("write", {"json": {"text": f"{SECRET} diary"}}),
    ("GET", f"{_U}/diary"): ("read", {}),
    ("GET", "/v1/apps/{app}/graph/export"): ("read", {}),
    ("POST", "/v1/apps/{app}/graph/import"): ("write", {"content": b""}),
    ("GET", f"{_M0}/v1/ping/"): ("other", {}),
    ("POST", f"{_M0}/v1/memories/"): ("write", {"json": {
        "messages": [{"role": "user", "content": f"{SECRET} mem0 1.x"}], "user_id": "u1", "infer": False}}),
    ("POST", f"{_M0}/v2/memories/search/"): ("read", {"json": {"query": SECRET, "user_id": "u1"}}),
    ("POST", f"{_M0}/v2/memories/"): ("read", {"json": {"user_id": "u1"}}),
    ("PUT", f"{_M0}/v1/batch/"): ("write", {"json": {"memories": [{"memory_id": "x", "text": f"{SECRET} b"}]}}),
    # its ids are in the body (an unknown one is 404 before anything is deleted): mem0/test_conformance.py
    ("DELETE", f"{_M0}/v1/batch/"): ("other", {}),
    ("POST", f"{_M0}/v1/feedback/"): ("other", {}),
    ("POST", f"{_M0}/v3/memories/add/"): ("write", {"json": {
        "messages": [{"role": "user", "content": f"{SECRET} mem0"}], "user_id": "u1", "infer": False}}),
    ("POST", f"{_M0}/v3/memories/search/"): ("read", {"json": {"query": SECRET, "filters": {"user_id": "u1"}}}),
    ("POST", f"{_M0}/v3/memories/"): ("read", {"json": {"filters": {"user_id": "u1"}}}),
    ("GET", f"{_M0}/v1/memories/{{memory_id}}/"): ("read", {}),
    ("PUT", f"{_M0}/v1/memories/{{memory_id}}/"): ("write", {"json": {"text": f"{SECRET} via mem0"}}),
    ("DELETE", f"{_M0}/v1/memories/{{memory_id}}/"): ("erase", {}),
    ("DELETE", f"{_M0}/v1/memories/"): ("erase", {"params": {"user_id": "u1"}}),
    ("GET", f"{_M0}/v1/memories/{{memory_id}}/history/"): ("read", {}),
    ("GET", f"{_M0}/v1/entities/"): ("read", {}),
    ("DELETE", f"{_M0}/v2/entities/{{entity_type}}/{{name}}/"): ("erase", {}),
}


def test_memory_off_holds_on_every_route(tmp_path: Any, hashing_embedder: Any) -> None:
    """An app with stored memories is switched to ``memory: off``: every route of the HTTP app (the
    OpenAPI list, each classified in :data:`ROUTES`) either answers without any stored text (reads:
    get, list, search, preload, recall, tools, export, jobs, Mem0's reads and history), refuses with 403
    and writes nothing (add, update, tool calls, import, Mem0 add and update), skips (ingest), or erases
    (deletes and erasure always work). Switched back on, the memories are all there, unchanged."""
    from serve_apps.mem0.map import mem0_id
    from tests.serve_apps.conftest import serve_local

    def server(memory: str) -> Any:
        return serve_local(tmp_path, hashing_embedder, memory={"apps": {GATED: {"memory": memory}}})

    base = f"/v1/apps/{GATED}/users/u1"
    with server("on") as on, on.client() as c:
        kept = c.post(f"{base}/memories", json={"text": f"{SECRET} secret kept"}).json()
        gone = c.post(f"{base}/memories", json={"text": f"{SECRET} secret tombstone"}).json()
        assert c.delete(f"{base}/memories/{gone['id']}").status_code == 204
        job = c.post(f"{base}/sessions/s1/events", params={"wait": 10}, json={"events": [
            {"id": "e1", "role": "user", "content": f"{SECRET} secret turn"}]}).json()
        assert job["status"] == "done", job
        before = c.get(f"/v1/apps/{GATED}/export").content
        assert before.count(SECRET.encode()) == 3
    values = {"app": GATED, "user": "u1", "memory_id": kept["id"], "session": "s1", "event_id": "e1",
              "job_id": job["job_id"], "entity_type": "user", "name": "u1", "fact_id": "f1"}
    mem0_values = {**values, "memory_id": mem0_id("u1", kept["id"])}
    headers = {"X-Memcluster-App": GATED}

    def send(c: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = path.format(**(mem0_values if path.startswith(_M0) else values))
        return c.request(method, url, headers=headers, **kwargs)

    with server("off") as off, off.client() as c:
        spec = c.get("/openapi.json").json()
        listed = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
        assert listed == set(ROUTES), listed ^ set(ROUTES)  # a new route must be classified here
        for (method, path), (kind, kwargs) in ROUTES.items():
            if kind == "read":
                r = send(c, method, path, **kwargs)
                assert r.status_code in (200, 404), (method, path, r.text)
                assert SECRET not in r.text, (method, path, r.text)
            elif kind == "skip":
                r = send(c, method, path, **kwargs)
                assert r.status_code == 200 and r.json()["status"] == "skipped", r.text
            elif kind == "write":
                if path.endswith("/tools/{name}"):
                    calls = [(path.replace("{name}", t), {"json": {"arguments": ARGS[t]}}) for t in ALL_TOOLS]
                elif path.endswith("/import"):
                    calls = [(path, {"content": before})]
                else:
                    calls = [(path, kwargs)]
                for p, kw in calls:
                    r = send(c, method, p, **kw)
                    allowed = (403, 404) if "{memory_id}" in p else (403,)  # an update may look its target up
                    assert r.status_code in allowed, (method, p, r.text)
                    if r.status_code == 403:
                        assert r.json()["error"] == "PermissionDeniedError" and r.json()["field"] == "app", r.text
        assert c.get(f"/v1/apps/{GATED}/tools").json()["tools"] == []
        assert c.get(f"/v1/apps/{GATED}/export").content == b""
    with server("on") as on, on.client() as c:
        assert c.get(f"/v1/apps/{GATED}/export").content == before  # nothing written, nothing lost
    with server("off") as off, off.client() as c:
        for (method, path), (kind, kwargs) in ROUTES.items():
            if kind == "erase" and path != _U:
                r = send(c, method, path, **kwargs)
                assert r.status_code < 300 or (r.status_code == 404 and "{" in path), (method, path, r.text)
        r = send(c, "DELETE", _U)
        assert r.status_code == 200, r.text
    with server("on") as on, on.client() as c:
        assert c.get(f"/v1/apps/{GATED}/export").content == b""  # deleting works while memory is off
        assert c.post(f"{base}/sessions/recall", json={"query": SECRET}).json()["hits"] == []
