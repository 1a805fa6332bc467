"""TTL covers archived turns: through the HTTP API (local backend, real engines), the shards' own
maintenance thread deletes an app's archived turns older than its lifetime, so session recall stops
returning them, while recent turns, other apps' turns and the memories (their own TTL counts from
their last write) stay."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

U = "/v1/apps/{app}/users/u1"


def recall(c: httpx.Client, app: str, query: str) -> list[str]:
    r = c.post(U.format(app=app) + "/sessions/recall", json={"query": query})
    assert r.status_code == 200, r.text
    return [h["content"] for h in r.json()["hits"]]


def test_archived_turns_expire_with_the_app_ttl(make_server: Any, tmp_path: Path) -> None:
    served = make_server(ttl={"apps": {"short": 3600.0}, "sweep_s": 0.2})
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    recent = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    with served.client() as c:
        for app in ("short", "kept"):
            r = c.post(U.format(app=app) + "/sessions/s1/events?wait=10", json={"events": [
                {"id": "old", "role": "user", "content": "zqxttlmarker the old turn", "timestamp": old},
                {"id": "new", "role": "user", "content": "zqxttlrecent the new turn", "timestamp": recent}]})
            assert r.status_code == 200 and r.json()["status"] == "done", r.text
        deadline = time.monotonic() + 20
        while recall(c, "short", "zqxttlmarker") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert recall(c, "short", "zqxttlmarker") == []
        assert recall(c, "short", "zqxttlrecent") == ["zqxttlrecent the new turn"]
        assert recall(c, "kept", "zqxttlmarker") == ["zqxttlmarker the old turn"]  # no TTL for this app
        texts = [e["text"] for e in c.get(U.format(app="short") + "/memories").json()["entries"]]
        assert any("zqxttlmarker" in t for t in texts)  # the memory is fresh: its own TTL has not run out
