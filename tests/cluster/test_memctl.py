"""memctl end to end: `up` starts a Ray head on loopback and deploys behind the default ingress (``auto``:
Serve's HAProxy mode here, with HAProxy's stats and metrics ports on loopback only); the README walk-through
(tell a rule in session A, find it from session B) over curl-like HTTP; `down` keeps the data; a second
`up`, behind Serve's proxy (``http.ingress=proxy``) and with API keys on, serves what the first one stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

LOOPBACK = "0100007F"
"""127.0.0.1 as /proc/net/tcp writes it."""


def listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} writes them) that listen on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found

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
    stats, metrics = free_port(), free_port()
    env.update({"MEMCLUSTER_HTTP__HAPROXY__STATS_PORT": str(stats),
                "MEMCLUSTER_HTTP__HAPROXY__METRICS_PORT": str(metrics)})
    up = memctl(*up_args, env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"memcluster is up: {base}" in up.stdout
        # the default ingress is HAProxy where its binary is installed; Serve's template binds its stats page
        # and exporter on every interface, memcluster's launcher on loopback only
        status = memctl("status", env=env)
        assert '"ingress": "haproxy"' in status.stdout, status.stdout
        assert httpx.get(f"http://127.0.0.1:{stats}/stats", timeout=5).status_code == 200  # HAProxy itself
        assert listening(stats) == {LOOPBACK} and listening(metrics) == {LOOPBACK}
        assert listening(port) == {LOOPBACK}
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

    # the second `up` switches to Serve's proxy (`http.ingress=proxy`) and turns API keys on: keys, search and
    # `down` behave as behind HAProxy, what the first cluster stored is there, and no HAProxy runs
    env.update({"MEMCLUSTER_HTTP__INGRESS": "proxy", "MEMCLUSTER_API_KEYS": '{"demo": "k-demo"}'})
    auth = {"Authorization": "Bearer k-demo"}
    again = memctl(*up_args, env=env)
    try:
        assert again.returncode == 0, again.stdout + again.stderr
        status = memctl("status", env=env)
        assert status.returncode == 0 and '"ingress": "proxy"' in status.stdout, status.stdout
        assert not listening(stats)
        assert httpx.post(f"{user}/memories/search", json={"query": "meetings before 10am"}).status_code == 401
        hits = httpx.post(f"{user}/memories/search", json={"query": "meetings before 10am"}, headers=auth)
        assert hits.status_code == 200 and "Server-Timing" in hits.headers
        assert hits.json()["hits"][0]["entry"]["text"] == "Never schedule meetings before 10am"
        assert httpx.get(f"{base}/openapi.json").json()["info"]["title"] == "memcluster memory service"
    finally:
        down = memctl("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/healthz", timeout=2)
