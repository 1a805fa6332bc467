"""Auto-memory routes over real HTTP (uvicorn + LocalShardBackend): ingest, jobs, recall, auth."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from typing import Any

import httpx
import pytest

from memcore.model import UserKey
from testkit.scripted_llm import Reply, ScriptedLLM
from tests.auto_memory import T0, extractor_settings, remember_tokens, turns
from tests.serve_apps.conftest import AUTH_KEYS, Served

A_KEY = {"Authorization": f"Bearer {AUTH_KEYS['app-a']}"}
B_KEY = {"Authorization": f"Bearer {AUTH_KEYS['app-b']}"}


def events_url(app: str, user: str, session: str) -> str:
    return f"/v1/apps/{app}/users/{user}/sessions/{session}/events"


def wait_job(c: httpx.Client, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = c.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["status"] in ("done", "failed", "skipped") or time.monotonic() > deadline:
            return body
        time.sleep(0.02)


@pytest.fixture
def served(make_server: Callable[..., Served]) -> Served:
    return make_server(api_keys=AUTH_KEYS)


def test_verbatim_ingest_end_to_end(served: Served) -> None:
    with served.client(headers=A_KEY) as c:
        r = c.post(events_url("app-a", "u1", "s1"), json={"events": turns(2)})
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["status"] == "queued" and r.headers["Location"] == f"/v1/jobs/{job['job_id']}"
        assert (job["app"], job["user"], job["session"]) == ("app-a", "u1", "s1")
        final = wait_job(c, job["job_id"])
        assert final["status"] == "done" and final["errors"] == []
        assert [o["status"] for o in final["operations"]] == ["applied", "applied"]
        assert final["cursor"] == (T0 + timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
        hits = c.post("/v1/apps/app-a/users/u1/memories/search",
                      json={"query": "conversation about kiwis", "hybrid": True}).json()["hits"]
        assert sorted(h["entry"]["provenance"] for h in hits) == [["s1/e0"], ["s1/e1"]]
        assert {h["entry"]["kind"] for h in hits} == {"episode"}
        ids = {o["effective_id"] for o in final["operations"]}
        assert {h["entry"]["id"] for h in hits} == ids
        again = c.post(events_url("app-a", "u1", "s1"), json={"events": turns(2)})
        assert again.status_code == 200 and again.json()["status"] == "skipped"


def test_ingest_validation_names_the_field(served: Served) -> None:
    with served.client(headers=A_KEY) as c:
        bad = {"id": "e1", "role": "robot", "content": "x", "timestamp": T0.isoformat()}
        cases: list[tuple[Any, str, str]] = [
            ({"events": [bad]}, "s1", "events.0.role"),
            ({"events": [{**turns(1)[0], "timestamp": "yesterday"}]}, "s1", "events.0.timestamp"),
            ({"events": turns(1) + turns(1)}, "s1", "events"),
            ({}, "s1", "events"),
            ({"events": turns(1), "extra": 1}, "s1", "extra"),
            ({"events": turns(1)}, "%20s1", "session"),
        ]
        for body, session, field in cases:
            r = c.post(events_url("app-a", "u1", session), json=body)
            assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)
        assert c.post(events_url("app-a", "u1", "s1"), json={"events": []}).json()["status"] == "skipped"


def test_job_is_visible_to_its_app_only(served: Served) -> None:
    with served.client() as c:
        job = c.post(events_url("app-a", "u1", "private"), json={"events": turns(1)}, headers=A_KEY).json()
        url = f"/v1/jobs/{job['job_id']}"
        assert c.get(url).status_code == 401
        assert c.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        other = c.get(url, headers=B_KEY)
        assert other.status_code == 404 and other.json()["error"] == "NotFoundError"
        assert c.get(url, headers=A_KEY).json()["job_id"] == job["job_id"]
        for bad in ("nope", "9-" + "0" * 32, "1-" + "z" * 32, "0-" + "0" * 32):
            r = c.get(f"/v1/jobs/{bad}", headers=A_KEY)
            assert r.status_code == 404 and r.json()["field"] == "job_id", (bad, r.text)
        assert c.post(events_url("app-a", "u1", "s"), json={"events": turns(1)}, headers=B_KEY).status_code == 403


def test_session_recall(served: Served) -> None:
    with served.client() as c:
        def ingest(app: str, user: str, session: str, text: str, key: dict[str, str]) -> None:
            r = c.post(events_url(app, user, session), json={"events": turns(2, text=text)}, headers=key)
            assert r.status_code in (200, 202), r.text

        ingest("app-a", "carol", "trip", "we booked the ferry to Naxos ({i})", A_KEY)
        ingest("app-a", "carol", "current", "which ferry did we book? ({i})", A_KEY)
        ingest("app-a", "dave", "trip", "dave's ferry to Naxos ({i})", A_KEY)
        ingest("app-b", "carol", "trip", "app-b ferry to Naxos ({i})", B_KEY)
        r = c.post("/v1/apps/app-a/users/carol/sessions/recall",
                   json={"query": "ferry to Naxos", "session": "current", "max_results": 5}, headers=A_KEY)
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert [h["session"] for h in hits] == ["trip", "trip"]
        assert all(h["content"].startswith("we booked") and h["score"] > 0 for h in hits)
        assert {h["event_id"] for h in hits} == {"e0", "e1"} and {h["role"] for h in hits} == {"user", "assistant"}
        everything = c.post("/v1/apps/app-a/users/carol/sessions/recall", json={"query": "ferry"}, headers=A_KEY)
        assert {h["session"] for h in everything.json()["hits"]} == {"trip", "current"}
        r = c.post("/v1/apps/app-a/users/carol/sessions/recall", json={"query": ""}, headers=A_KEY)
        assert r.status_code == 422 and r.json()["field"] == "query"
        r = c.post("/v1/apps/app-a/users/carol/sessions/recall", json={"query": "x", "max_results": 0}, headers=A_KEY)
        assert r.status_code == 422 and r.json()["field"] == "max_results"


def test_fifty_concurrent_sessions_are_extracted_in_ingest_order(served: Served) -> None:
    async def send() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=served.url, headers=A_KEY, timeout=120) as h:
            return await asyncio.gather(*(
                h.post(events_url("app-a", "erin", f"session-{i}"),
                       json={"events": turns(1, prefix=f"s{i}-", text=f"session {i} mentions kiwi {i}")})
                for i in range(50)))

    responses = asyncio.run(send())
    assert {r.status_code for r in responses} <= {200, 202} and 202 in {r.status_code for r in responses}
    with served.client(headers=A_KEY) as c:
        jobs = sorted((wait_job(c, r.json()["job_id"], 120) for r in responses), key=lambda j: j["seq"])
        assert [j["status"] for j in jobs] == ["done"] * 50
        for before, after in pairwise(jobs):
            assert before["finished_at"] <= after["started_at"]
        entries = c.get("/v1/apps/app-a/users/erin/memories?limit=1000").json()["entries"]
    when = {e["provenance"][0].split("/")[0]: e["updated_at"] for e in entries}
    stamps = [when[j["session"]] for j in jobs]
    assert stamps == sorted(stamps) and len(set(stamps)) == 50


def test_full_queue_waits_for_the_job_and_survives_a_disconnect(make_server: Callable[..., Served],
                                                                  scripted_llm: ScriptedLLM) -> None:
    served = make_server(extractor=extractor_settings(scripted_llm.base_url, policy="append_only"))
    for core in served.backend.shards:
        core.jobs.capacity = 0  # every ingest takes the synchronous fallback
    scripted_llm.push(lambda req: Reply(tool_calls=tuple(remember_tokens(req)), delay=1.0), remember_tokens)
    with httpx.Client(base_url=served.url, timeout=0.3) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post(events_url("app-a", "frank", "s1"), json={"events": turns(2, text="token-{i}")})
    key = UserKey(app="app-a", user="frank")
    core = served.backend.core(key)
    deadline = time.monotonic() + 10
    while not [j for j in core.archive.jobs.of_session(key, "s1") if j.finished] and time.monotonic() < deadline:
        time.sleep(0.05)
    (job,) = core.archive.jobs.of_session(key, "s1")
    assert job.status == "done" and job.sync and job.counts["applied"] == 2  # the disconnect cancelled nothing
    with served.client() as c:
        r = c.post(events_url("app-a", "frank", "s1"), json={"events": turns(3, text="token-{i}")})
        assert r.status_code == 200 and r.json()["status"] == "done" and r.json()["sync"] is True
        assert len(c.get("/v1/apps/app-a/users/frank/memories").json()["entries"]) == 3


def test_extractor_failure_is_reported_on_the_job(make_server: Callable[..., Served],
                                                  scripted_llm: ScriptedLLM) -> None:
    served = make_server(extractor=extractor_settings(scripted_llm.base_url))
    scripted_llm.push(Reply(status=500, body={"error": {"message": "model crashed", "type": "server_error"}}))
    with served.client() as c:
        job = c.post(events_url("app-a", "gina", "s1"), json={"events": turns(2)}).json()
        final = wait_job(c, job["job_id"])
        assert final["status"] == "failed" and "HTTP 500" in final["reason"] and final["cursor"] is None
        assert final["errors"] and final["operations"] == []
