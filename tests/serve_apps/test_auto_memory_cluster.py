"""Auto memory on a local Ray cluster: Serve ingress + shard actors + the scripted LLM over HTTP.

Few tests (Ray is slow): the whole path end to end, and a shard actor killed (SIGKILL) while
the model is slow and jobs are queued: after Ray restarts it, every acknowledged job finishes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.scripted_llm import Reply, ScriptedLLM
from tests.auto_memory import remember_tokens, turns
from tests.serve_apps.ray_app import wait_ready

pytestmark = pytest.mark.ray

KEYS = {"app1": "auto-key-one", "app2": "auto-key-two"}
NAMESPACE = "memcluster-auto-test"
PREFIX = "/auto"


def _h(app: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[app]}"}


@pytest.fixture(scope="module")
def auto(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import ray
    from ray import serve

    from actors.router import actor_name
    from serve_apps.builder import build_app

    state = {"delay": 0.0}

    def answer(request: dict[str, Any]) -> Reply:
        return Reply(tool_calls=tuple(remember_tokens(request)), delay=state["delay"])

    with ScriptedLLM([answer] * 500) as llm:
        settings = {
            "data_dir": str(tmp_path_factory.mktemp("auto-data")), "shards": 2, "namespace": NAMESPACE,
            "embedder": {"kind": "hashing", "dim": 256}, "api_keys": KEYS,
            "extractor": {"base_url": llm.base_url, "model": "scripted", "policy": "append_only",
                          "job_timeout_s": 20},
        }
        serve.run(build_app({"settings": settings}), name="memauto", route_prefix=PREFIX)
        base = f"http://127.0.0.1:{serve_port}{PREFIX}"
        wait_ready(base)
        yield {"base": base, "llm": llm, "state": state}
        serve.delete("memauto")
        for k in range(2):
            ray.kill(ray.get_actor(actor_name(k), namespace=NAMESPACE))


def _events_url(c: dict[str, Any], app: str, user: str, session: str) -> str:
    return f"{c['base']}/v1/apps/{app}/users/{user}/sessions/{session}/events"


def _wait_job(h: httpx.Client, c: dict[str, Any], job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = h.get(f"{c['base']}/v1/jobs/{job_id}")
        if r.status_code == 200:
            body = r.json()
            if body["status"] in ("done", "failed", "skipped"):
                return body
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish: {body}")


def test_ingest_extract_search_recall_over_ray(auto: dict[str, Any]) -> None:
    with httpx.Client(headers=_h("app1"), timeout=60) as h:
        r = h.post(_events_url(auto, "app1", "ivy", "s1"), json={"events": turns(2, text="I got token-{i} today")})
        assert r.status_code == 202, r.text
        assert r.headers["Location"] == f"{PREFIX}/v1/jobs/{r.json()['job_id']}"
        job = _wait_job(h, auto, r.json()["job_id"])
        assert job["status"] == "done" and job["counts"]["applied"] == 2, job
        hits = h.post(f"{auto['base']}/v1/apps/app1/users/ivy/memories/search",
                      json={"query": "lucky token-1", "hybrid": True}).json()["hits"]
        assert "token-1" in hits[0]["entry"]["text"] and hits[0]["entry"]["provenance"] == ["s1/e0", "s1/e1"]
        h.post(_events_url(auto, "app1", "ivy", "s2"), json={"events": turns(1, text="token-9 again", prefix="n")})
        recalled = h.post(f"{auto['base']}/v1/apps/app1/users/ivy/sessions/recall",
                          json={"query": "token-1", "session": "s2"}).json()["hits"]
        assert {x["session"] for x in recalled} == {"s1"} and recalled[0]["event_id"] == "e1"
        assert h.get(f"{auto['base']}/v1/jobs/{job['job_id']}", headers=_h("app2")).status_code == 404


def test_killed_shard_finishes_every_accepted_job(auto: dict[str, Any]) -> None:
    import ray

    from actors.router import actor_name
    from memcore.ids import shard_of
    from memcore.model import UserKey

    shard = shard_of(UserKey(app="app1", user="jack"), 2)
    auto["state"]["delay"] = 3.0  # a slow model: jobs pile up behind the running one
    with httpx.Client(headers=_h("app1"), timeout=60) as h:
        accepted = []
        for i in range(4):
            r = h.post(_events_url(auto, "app1", "jack", f"s{i}"),
                       json={"events": turns(1, text=f"remember token-{100 + i}", prefix=f"s{i}-")})
            assert r.status_code == 202, r.text
            accepted.append(r.json()["job_id"])
        deadline = time.monotonic() + 10
        while h.get(f"{auto['base']}/v1/jobs/{accepted[0]}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status = ray.get(ray.get_actor(actor_name(shard), namespace=NAMESPACE).status.remote())
        assert status["extraction"]["queued"] == 3 and status["extraction"]["running"] == 1
        os.kill(status["pid"], signal.SIGKILL)  # mid-job, three more queued
        auto["state"]["delay"] = 0.0
        ready = wait_ready(auto["base"])
        restarted = next(s for s in ready["shards"] if s["shard"] == shard)
        assert restarted["pid"] != status["pid"] and restarted["extraction"]["recovered_on_start"] == 4
        jobs = [_wait_job(h, auto, j, timeout=120) for j in accepted]
        assert [j["status"] for j in jobs] == ["done"] * 4, jobs
        assert jobs[0]["attempts"] == 2  # it ran again after the restart
        entries = h.get(f"{auto['base']}/v1/apps/app1/users/jack/memories?limit=100").json()["entries"]
        assert {e["text"] for e in entries} == {f"The user's lucky token-{100 + i} is remembered" for i in range(4)}
