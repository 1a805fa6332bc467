"""The HTTP API over shards whose event archive is one PostgreSQL (``archive.backend: postgres``): real
HTTP (uvicorn + LocalShardBackend, two shards sharing the database), ingest, jobs and session recall,
and the database stopped and restarted under it: 503 with ``Retry-After`` and the JSON error shape,
then recovery without a restart of the shards; a shard fenced by a newer incarnation answers 503."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from actors.shard import ShardCore
from memcore.ids import shard_of
from memcore.model import UserKey
from tests.auto_memory import turns
from tests.conftest import pg_schema
from tests.serve_apps.conftest import Served
from tests.serve_apps.http.test_ingest import events_url, wait_job

USER = "/v1/apps/app/users"


def unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "1"
    body = r.json()
    assert set(body) == {"error", "field", "message"} and body["error"] == "ArchiveUnavailableError", body
    assert body["field"] == "archive" and "retry later" in body["message"]


def test_postgres_archive_over_http_with_an_outage(make_server: Callable[..., Served], postgres_server: Any) -> None:
    served = make_server(archive={"backend": "postgres", "dsn": postgres_server.dsn, "db_schema": pg_schema(),
                                  "pool_timeout_s": 1.0, "connect_timeout_s": 1})
    with served.client() as c:
        assert [shard_of(UserKey(app="app", user=u), 2) for u in ("carol", "dave")] == [1, 0]  # both shards
        for user in ("carol", "dave"):
            events = turns(2, text="we booked the ferry to Naxos ({i})")
            r = c.post(events_url("app", user, "trip"), json={"events": events})
            assert r.status_code == 202, r.text
            assert wait_job(c, r.json()["job_id"])["status"] == "done"
        r = c.post(f"{USER}/carol/sessions/recall", json={"query": "ferry to Naxos"})
        assert r.status_code == 200 and {h["event_id"] for h in r.json()["hits"]} == {"e0", "e1"}
        first_seq = int(c.post(f"{USER}/carol/memories", json={"text": "one"}).headers["X-Memcluster-Seq"])
        postgres_server.stop()
        try:
            t0 = time.monotonic()
            unavailable(c.post(events_url("app", "carol", "work"), json={"events": turns(2, text="report ({i})")}))
            unavailable(c.post(f"{USER}/carol/memories", json={"text": "two"}))
            unavailable(c.post(f"{USER}/carol/sessions/recall", json={"query": "ferry"}))
            assert time.monotonic() - t0 < 15  # each waits at most the pool timeout (and a connect timeout)
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 20
        while True:  # the shards recover by themselves
            r = c.post(events_url("app", "carol", "work"), json={"events": turns(2, text="report ({i})")})
            if r.status_code != 503:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.status_code == 202, r.text
        assert wait_job(c, r.json()["job_id"])["status"] == "done"
        r = c.post(f"{USER}/carol/memories", json={"text": "three"})
        assert r.status_code in (200, 201) and int(r.headers["X-Memcluster-Seq"]) > first_seq
        r = c.post(f"{USER}/carol/sessions/recall", json={"query": "report ferry"})
        assert {h["session"] for h in r.json()["hits"]} == {"trip", "work"}


def test_a_fenced_shard_answers_503_and_the_other_shards_serve(make_server: Callable[..., Served],
                                                               postgres_server: Any, tmp_path: Path,
                                                               hashing_embedder: Any) -> None:
    """A new incarnation of shard 0 starts elsewhere (on its own directory, same database): the served
    shard 0 is now stale; its next write is 503 ``FencedError`` with ``Retry-After``, and so is every call
    after; shard 1 keeps serving."""
    served = make_server(archive={"backend": "postgres", "dsn": postgres_server.dsn, "db_schema": pg_schema()})
    assert served.settings is not None
    with served.client() as c:
        assert c.post(f"{USER}/dave/memories", json={"text": "before"}).status_code == 201  # dave: shard 0
        newer = ShardCore(served.settings.model_copy(update={"data_dir": tmp_path / "elsewhere"}), 0,
                          hashing_embedder, start_workers=False)
        try:
            for r in (c.post(f"{USER}/dave/memories", json={"text": "stale"}), c.get(f"{USER}/dave/memories")):
                assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
                body = r.json()
                assert body["error"] == "FencedError" and body["field"] == "shard", body
                assert "epoch 1" in body["message"] and "epoch 2" in body["message"]
            assert c.post(f"{USER}/carol/memories", json={"text": "shard 1 serves"}).status_code == 201
            assert [e.text for e in newer.read(UserKey(app="app", user="dave"))] == []  # its own empty disk
        finally:
            newer.close()
