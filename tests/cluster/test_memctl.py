"""memctl end to end: `up` starts a Ray head on loopback and deploys; the README walk-through
(tell a rule in session A, find it from session B) over curl-like HTTP; `down` keeps the data;
a second `up`, behind Serve's HAProxy ingress (``http.ingress=haproxy``) and with API keys on, serves what
the first one stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow


def memctl(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_up_walkthrough_down_and_up_again(tmp_path: Path) -> None:
    port, ray_port = free_port(), free_port()
    env = {**os.environ, "MEMCTL_STATE": str(tmp_path / "state.json"), "MEMCLUSTER_EMBEDDER__KIND": "hashing",
           "MEMCLUSTER_SHARDS": "2", "RAY_USAGE_STATS_ENABLED": "0"}
    up_args = ("up", "--data-dir", str(tmp_path / "data"), "--port", str(port), "--ray-port", str(ray_port),
               "--num-cpus", "2", "--timeout", "240")
    base = f"http://127.0.0.1:{port}"
    user = f"{base}/v1/apps/demo/users/alice"
    up = memctl(*up_args, env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"memcluster is up: {base}" in up.stdout
        # session A: the user states a rule, the agent stores it
        r = httpx.post(f"{user}/memories", json={"text": "Never schedule meetings before 10am", "topics": ["calendar"]})
        assert r.status_code == 201, r.text
        for i in range(4):
            httpx.post(f"{user}/memories", json={"text": f"Likes fruit number {i}"})
        # session B: a new conversation finds it through preload and through search
        pre = httpx.post(f"{user}/preload", json={"budget": 2, "message": "Can we meet at 9am tomorrow?"}).json()
        assert pre["strategy"] == "search" and "Never schedule meetings before 10am" in pre["text"]
        status = memctl("status", env=env)
        assert status.returncode == 0 and '"status": "ready"' in status.stdout
    finally:
        down = memctl("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "data kept" in down.stdout
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=2)
    assert (tmp_path / "data" / "shards").is_dir()

    # the second `up` also switches to `http.ingress=haproxy` and turns API keys on: Serve's HAProxy listens on
    # the loopback port and forwards to the ingress replica's own server; keys, search and `down` behave as with
    # Serve's proxy, and what the first cluster stored is there
    stats, metrics = free_port(), free_port()
    env.update({"MEMCLUSTER_HTTP__INGRESS": "haproxy", "MEMCLUSTER_HTTP__HAPROXY__STATS_PORT": str(stats),
                "MEMCLUSTER_HTTP__HAPROXY__METRICS_PORT": str(metrics), "MEMCLUSTER_API_KEYS": '{"demo": "k-demo"}'})
    auth = {"Authorization": "Bearer k-demo"}
    again = memctl(*up_args, env=env)
    try:
        assert again.returncode == 0, again.stdout + again.stderr
        status = memctl("status", env=env)
        assert status.returncode == 0 and '"ingress": "haproxy"' in status.stdout, status.stdout
        assert httpx.get(f"http://127.0.0.1:{stats}/stats", timeout=5).status_code == 200  # HAProxy itself
        assert httpx.post(f"{user}/memories/search", json={"query": "meetings before 10am"}).status_code == 401
        hits = httpx.post(f"{user}/memories/search", json={"query": "meetings before 10am"}, headers=auth)
        assert hits.status_code == 200 and "Server-Timing" in hits.headers
        assert hits.json()["hits"][0]["entry"]["text"] == "Never schedule meetings before 10am"
        assert httpx.get(f"{base}/openapi.json").json()["info"]["title"] == "memcluster memory service"
    finally:
        down = memctl("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    for url in (f"{base}/healthz", f"http://127.0.0.1:{stats}/stats"):
        with pytest.raises(httpx.HTTPError):
            httpx.get(url, timeout=2)
