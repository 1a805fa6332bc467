"""Ingest takes chat messages as agents hold them, over real HTTP (uvicorn + LocalShardBackend):
no ids or timestamps, OpenAI content parts and tool calls, ``?wait=``, 422s naming the field, and the
OpenAPI schema that documents the optional fields."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.serve_apps.conftest import Served

URL = "/v1/apps/demo/users/{user}/sessions/{session}/events"


def post(c: httpx.Client, user: str, session: str, events: list[dict[str, Any]], **params: Any) -> httpx.Response:
    return c.post(URL.format(user=user, session=session), json={"events": events}, params=params)


def search(c: httpx.Client, user: str, query: str) -> list[str]:
    r = c.post(f"/v1/apps/demo/users/{user}/memories/search", json={"query": query})
    assert r.status_code == 200, r.text
    return [h["entry"]["text"] for h in r.json()["hits"]]


def test_a_plain_chat_history_is_ingested_and_found(client: httpx.Client) -> None:
    chat = [{"role": "user", "content": "I moved to Lisbon last month."},
            {"role": "assistant", "content": "Congratulations on the move to Lisbon!"}]
    r = post(client, "chat-u1", "s1", chat, wait=10)
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "done" and job["counts"]["applied"] == 2 and job["upto_seq"] is not None
    assert "User: I moved to Lisbon last month." in search(client, "chat-u1", "where does the user live?")
    again = post(client, "chat-u1", "s1", chat)  # the same history resent: nothing new
    assert again.status_code == 200 and again.json()["status"] == "skipped"
    grown = post(client, "chat-u1", "s1", [*chat, {"role": "user", "content": "yes"}], wait=10).json()
    assert grown["status"] == "done" and grown["counts"]["events"] == 1


def test_without_wait_the_job_is_queued(client: httpx.Client) -> None:
    r = post(client, "chat-u2", "s1", [{"role": "user", "content": "I like green tea"}])
    assert r.status_code == 202 and r.json()["status"] in ("queued", "running", "done")


def test_content_parts_and_tool_calls_over_http(client: httpx.Client) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "What's the weather in Porto?"},
                                     {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\":\"Porto\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "TOOL-RESULT-MARKER 18C"},
        {"role": "assistant", "content": "It is 18C in Porto."},
    ]
    job = post(client, "chat-u3", "s1", messages, wait=10).json()
    assert job["status"] == "done" and job["counts"]["ignored_content_parts"] == 1
    r = client.get("/v1/apps/demo/users/chat-u3/memories")
    texts = sorted(e["text"] for e in r.json()["entries"])
    assert texts == ["Assistant: It is 18C in Porto.", "User: What's the weather in Porto?"]
    recall = client.post("/v1/apps/demo/users/chat-u3/sessions/recall", json={"query": "TOOL-RESULT-MARKER"})
    assert recall.status_code == 200 and recall.json()["hits"] == []  # tool output is never archived


@pytest.mark.parametrize(
    ("events", "field"),
    [
        ([{"content": "no role"}], "events.0.role"),
        ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "events.1.role"),
        ([{"role": "user", "content": 42}], "events.0.content"),
        ([{"role": "user", "content": [{"text": "no type"}]}], "events.0.content"),
        ([{"role": "user", "content": "x", "timestamp": "tomorrow"}], "events.0.timestamp"),
        ([{"role": "user", "content": "x", "timestamp": "2100-01-01T00:00:00Z"}], "events.0.timestamp"),
        ([{"role": "user", "content": "x", "mood": "happy"}], "events.0.mood"),
        ([{"id": "a", "role": "user"}, {"id": "a", "role": "user"}], "events"),
    ],
)
def test_bad_messages_are_422_naming_the_field(client: httpx.Client, events: list[dict[str, Any]],
                                               field: str) -> None:
    r = post(client, "chat-bad", "s1", events)
    assert r.status_code == 422, r.text
    assert r.json()["field"].startswith(field), r.json()
    assert client.post("/v1/apps/demo/users/chat-bad/sessions/recall", json={"query": "x"}).json()["hits"] == []


def test_wait_is_bounded(client: httpx.Client) -> None:
    r = post(client, "chat-u4", "s1", [{"role": "user", "content": "hi"}], wait=61)
    assert r.status_code == 422 and r.json()["field"] == "wait"


def test_openapi_documents_the_optional_fields(server: Served) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    message = spec["components"]["schemas"]["Message"]
    assert message["required"] == ["role"]
    assert {"id", "timestamp", "content", "tool_calls", "tool_call_id", "name", "external_context"} <= set(
        message["properties"])
    content = message["properties"]["content"]
    assert {"string", "array"} <= {alt.get("type") for alt in content["anyOf"]}
    route = spec["paths"]["/v1/apps/{app}/users/{user}/sessions/{session}/events"]["post"]
    assert "wait" in {p["name"] for p in route["parameters"]}
    body = route["requestBody"]["content"]["application/json"]
    examples = spec["components"]["schemas"]["IngestRequest"].get("examples") or body.get("examples")
    assert examples and "id" not in examples[0]["events"][0]


def test_memclient_ingests_chat_messages(server: Served) -> None:
    from memclient import MemoryClient

    with MemoryClient(server.url) as mc:
        job = mc.ingest("demo", "chat-mc", "s1", [{"role": "user", "content": "My dog is called Bolt."},
                                                  {"role": "assistant", "content": "Bolt is a great name!"}], wait=10)
        assert job.status == "done" and job.data["counts"]["applied"] == 2
        assert mc.job(job.job_id).status == "done"
        hits = mc.search("demo", "chat-mc", "what is the dog's name?")
        assert "User: My dog is called Bolt." in [h.entry.text for h in hits]
