"""The whole stack on a local Ray cluster: Serve ingress + embedder deployment + shard actors, over real HTTP."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve_apps.ray_app import wait_ready

pytestmark = pytest.mark.ray

KEYS = {"app1": "key-one", "app2": "key-two"}


def _auth(app: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[app]}"}





@pytest.fixture(scope="module")
def cluster(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from ray import serve

    from serve_apps.builder import build_app

    data_dir = tmp_path_factory.mktemp("cluster-data")
    port = serve_port
    settings = {"data_dir": str(data_dir), "shards": 2, "namespace": "memcluster-test",
                "embedder": {"kind": "hashing", "dim": 256}, "api_keys": KEYS}
    serve.run(build_app({"settings": settings}), name="memcluster", route_prefix="/")
    base = f"http://127.0.0.1:{port}"
    wait_ready(base)
    yield {"base": base, "data_dir": data_dir}
    serve.delete("memcluster")
    import ray

    from actors.router import actor_name

    for k in range(2):
        ray.kill(ray.get_actor(actor_name(k), namespace="memcluster-test"))


def _url(c: dict[str, Any], app: str, user: str, path: str) -> str:
    return f"{c['base']}/v1/apps/{app}/users/{user}{path}"


def test_routes_over_ray(cluster: dict[str, Any]) -> None:
    with httpx.Client(headers=_auth("app1"), timeout=30) as h:
        r = h.post(_url(cluster, "app1", "u1", "/memories"),
                   json={"text": "Deploys happen on Fridays", "topics": ["ops"]})
        assert r.status_code == 201, r.text
        mid = r.json()["id"]
        assert h.get(_url(cluster, "app1", "u1", f"/memories/{mid}")).json()["text"] == "Deploys happen on Fridays"
        hits = h.post(_url(cluster, "app1", "u1", "/memories/search"), json={"query": "Fridays deploys"}).json()["hits"]
        assert hits[0]["entry"]["id"] == mid
        r = h.patch(_url(cluster, "app1", "u1", f"/memories/{mid}"), json={"text": "Deploys happen on Thursdays"})
        assert r.status_code == 200 and r.json()["id"] != mid
        assert h.get(_url(cluster, "app1", "u1", f"/memories/{mid}")).status_code == 404
        r = h.post(_url(cluster, "app1", "u1", "/memories"), json={"text": ""})
        assert r.status_code == 422 and r.json()["field"] == "text"
        assert h.delete(_url(cluster, "app1", "u1", "/memories")).status_code == 204
        assert h.get(_url(cluster, "app1", "u1", "/memories")).json()["entries"] == []
        ready = h.get(f"{cluster['base']}/readyz").json()
        assert [s["shard"] for s in ready["shards"]] == [0, 1]


def test_cross_session_recall(cluster: dict[str, Any]) -> None:
    with httpx.Client(headers=_auth("app1"), timeout=30) as h:
        # session A: the agent stores a rule through the tool API
        r = h.post(_url(cluster, "app1", "carol", "/tools/memory_add"),
                   json={"arguments": {"memory": "Always answer Carol in French", "topics": ["language"]}})
        assert r.status_code == 200, r.text
        for i in range(12):
            h.post(_url(cluster, "app1", "carol", "/memories"), json={"text": f"unrelated note {i} about gardening"})
        # session B: preload with the new user message finds the rule among 13 memories
        r = h.post(_url(cluster, "app1", "carol", "/preload"),
                   json={"budget": 3, "message": "which language to answer in?"})
        body = r.json()
        assert body["strategy"] == "search"
        assert "Always answer Carol in French" in body["text"]


def test_apps_and_users_are_isolated(cluster: dict[str, Any]) -> None:
    with httpx.Client(timeout=30) as h:
        r = h.post(_url(cluster, "app1", "dave", "/memories"), json={"text": "dave's secret"}, headers=_auth("app1"))
        mid = r.json()["id"]
        assert h.get(_url(cluster, "app1", "dave", "/memories")).status_code == 401
        assert h.get(_url(cluster, "app1", "dave", "/memories"), headers=_auth("app2")).status_code == 403
        assert h.get(_url(cluster, "app1", "eve", f"/memories/{mid}"), headers=_auth("app1")).status_code == 404
        assert h.delete(_url(cluster, "app1", "eve", f"/memories/{mid}"), headers=_auth("app1")).status_code == 404
        r = h.post(_url(cluster, "app2", "dave", "/memories/search"), json={"query": "secret"}, headers=_auth("app2"))
        assert r.json()["hits"] == []
        assert h.get(_url(cluster, "app1", "dave", f"/memories/{mid}"), headers=_auth("app1")).status_code == 200


def test_100_concurrent_writes_for_one_user_in_order(cluster: dict[str, Any]) -> None:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=_auth("app2"), timeout=180) as h:
            return await asyncio.gather(*(
                h.post(_url(cluster, "app2", "frank", "/memories"), json={"text": f"write number {i}"})
                for i in range(100)
            ))

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [201] * 100
    seqs = [int(r.headers["X-Memcluster-Seq"]) for r in responses]
    assert len(set(seqs)) == 100
    by_seq = sorted(responses, key=lambda r: int(r.headers["X-Memcluster-Seq"]))
    stamps = [r.json()["updated_at"] for r in by_seq]
    assert stamps == sorted(stamps)  # the shard applied them one by one in its FIFO order
    entries = httpx.get(_url(cluster, "app2", "frank", "/memories?limit=1000"), headers=_auth("app2")).json()["entries"]
    assert {e["text"] for e in entries} == {f"write number {i}" for i in range(100)}


def test_killed_shard_loses_no_acknowledged_write(cluster: dict[str, Any]) -> None:
    import ray

    from actors.router import actor_name
    from memcore.ids import shard_of
    from memcore.model import UserKey

    shard = shard_of(UserKey(app="app1", user="grace"), 2)
    acked: list[str] = []
    failed = 0
    killed = False
    seqs: list[int] = []
    with httpx.Client(headers=_auth("app1"), timeout=60) as h:
        for i in range(60):
            if i == 25:
                status = ray.get(ray.get_actor(actor_name(shard), namespace="memcluster-test").status.remote())
                # the keyword index is lost with the crash: moved away at once (the live shard's committer may be
                # writing into it, so an rmtree could meet new files), removed once the process is killed
                keywords = Path(cluster["data_dir"]) / "shards" / f"{shard:04d}" / "keywords"
                os.rename(keywords, keywords.with_name("keywords.lost"))
                os.kill(status["pid"], signal.SIGKILL)  # a crash, not a polite stop
                shutil.rmtree(keywords.with_name("keywords.lost"), ignore_errors=True)
                killed = True
            r = h.post(_url(cluster, "app1", "grace", "/memories"), json={"text": f"ledger line {i} kiwi"})
            if r.status_code == 201:
                acked.append(r.json()["id"])
                seqs.append(int(r.headers["X-Memcluster-Seq"]))
            else:
                assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
                failed += 1
        assert killed
        # The user's write numbers keep rising across the crash (the counter is durable), never restart at 1.
        assert seqs == sorted(set(seqs)) and seqs[-1] >= len(seqs)
        ready = wait_ready(cluster["base"])
        entries = h.get(_url(cluster, "app1", "grace", "/memories?limit=1000")).json()["entries"]
        assert set(acked) <= {e["id"] for e in entries}
        assert len(acked) >= 60 - failed
        restarted = next(s for s in ready["shards"] if s["shard"] == shard)
        assert restarted["pid"] != status["pid"]
        assert restarted["rebuilt_on_start"] is not None  # the missing keyword index was rebuilt
        assert restarted["keyword_docs"] == restarted["entries"]
        hits = h.post(_url(cluster, "app1", "grace", "/memories/search"),
                      json={"query": "kiwi", "max_results": 100, "hybrid": True}).json()["hits"]
        assert {x["entry"]["id"] for x in hits} >= set(acked[:25])
