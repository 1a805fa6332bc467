"""TTL covers archived turns: through the HTTP API (local backend, real engines), the shards' own
maintenance thread deletes an app's archived turns older than its lifetime, so session recall stops
returning them, while recent turns, other apps' turns and the memories (their own TTL counts from
their last write) stay."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from memcore.model import UserKey

U = "/v1/apps/{app}/users/u1"


def recall(c: httpx.Client, app: str, query: str) -> list[str]:
    r = c.post(U.format(app=app) + "/sessions/recall", json={"query": query})
    assert r.status_code == 200, r.text
    return [h["content"] for h in r.json()["hits"]]


def test_archived_turns_expire_with_the_app_ttl(make_server: Any, tmp_path: Path) -> None:
    # the sweep runs by hand once both apps' turns are extracted (a sweep between a turn's append and its
    # extraction would remove a turn that arrived already past the lifetime before any memory cites it)
    served = make_server(ttl={"apps": {"short": 3600.0}, "sweep_s": 3600.0})
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    recent = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    with served.client() as c:
        for app in ("short", "kept"):
            r = c.post(U.format(app=app) + "/sessions/s1/events?wait=10", json={"events": [
                {"id": "old", "role": "user", "content": "zqxttlmarker the old turn", "timestamp": old},
                {"id": "new", "role": "user", "content": "zqxttlrecent the new turn", "timestamp": recent}]})
            assert r.status_code == 200 and r.json()["status"] == "done", r.text
        swept = [shard.maintenance.run_once() for shard in served.backend.shards]
        assert sum(s["expired_events"] for s in swept) == 1, swept  # the short app's old turn
        assert recall(c, "short", "zqxttlmarker") == []
        assert recall(c, "short", "zqxttlrecent") == ["zqxttlrecent the new turn"]
        assert recall(c, "kept", "zqxttlmarker") == ["zqxttlmarker the old turn"]  # no TTL for this app
        listed = c.get(U.format(app="short") + "/memories")
        assert listed.status_code == 200, listed.text
        texts = [e["text"] for e in listed.json()["entries"]]
        assert any("zqxttlmarker" in t for t in texts)  # the memory is fresh: its own TTL has not run out


def test_an_expired_memory_is_gone_from_export_and_mem0_history_before_the_sweep(make_server: Any) -> None:
    """Expired means gone from every read, before the sweep runs (here: never, a sweep every hour): the
    export (a backup) and Mem0's history of the memory, its soft-deleted tombstone included."""
    from serve_apps.mem0.map import mem0_id

    served = make_server(ttl={"sweep_s": 3600.0})
    base = U.format(app="exp")
    with served.client(headers={"X-Memcluster-App": "exp"}) as c:
        brief = c.post(f"{base}/memories", json={"text": "the door code is 4711", "ttl_s": 6}).json()
        tomb = c.post(f"{base}/memories", json={"text": "the gate code is 1234", "ttl_s": 6}).json()
        assert c.delete(f"{base}/memories/{tomb['id']}").status_code == 204
        kept = c.post(f"{base}/memories", json={"text": "the bike is blue"}).json()
        history = c.get(f"/mem0/v1/memories/{mem0_id('u1', tomb['id'])}/history/")
        assert history.status_code == 200, history.text
        assert [h["event"] for h in history.json()] == ["ADD", "DELETE"], history.text
        assert c.get("/v1/apps/exp/export").text.count('"id"') == 3
        until = max(datetime.fromisoformat(e["expires_at"]) for e in (brief, tomb))
        time.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.05)
        lines = c.get("/v1/apps/exp/export").text.splitlines()
        assert [json.loads(line)["id"] for line in lines] == [kept["id"]]
        for gone in (brief, tomb):
            r = c.get(f"/mem0/v1/memories/{mem0_id('u1', gone['id'])}/history/")
            assert r.status_code == 404, r.text
    key = UserKey(app="exp", user="u1")
    ids = [brief["id"], tomb["id"]]
    stored = [e.id for shard in served.backend.shards for e in shard.service.vectors.get(key, ids)]
    assert sorted(stored) == sorted(ids)  # still stored: no sweep ran, no read returns them
