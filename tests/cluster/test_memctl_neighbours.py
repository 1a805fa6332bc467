"""memctl next to other Ray clusters on the same host: each memctl home stops only the Ray head it
started, also when another cluster's Ray lives in Ray's default temp dir (``/tmp/ray``); ``down``
is bounded when its head is already dead; ``up`` on a Ray port that another head uses (also one in
another network namespace) says so in one line and leaves nothing running.

Two clusters run side by side in the test's network namespace, each with its own HOME, data dir,
HTTP port and Ray port: ``mine`` with a ``RAY_TMPDIR`` of its own, ``neighbour`` with Ray's default
(``RAY_TMPDIR=/tmp``: ``/tmp/ray``, where every Ray that was told nothing lives). They use the hashing
embedder and one shard each (this is about processes, not retrieval; the first-run test covers the
packaged embedder). The tests run in file order against the pair: a busy Ray port and a failed deploy next
to them, ``down`` of a healthy ``mine``, then ``down`` of a ``neighbour`` whose head was killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.memctl_cluster import MEMCTL, ROOT, command_line, fresh_env, memctl, one_line, processes_with_env

pytestmark = pytest.mark.slow
DOWN_BOUND_S = 30.0
"""How long ``memctl down`` may take when its Ray head is already dead (a bound, not a benchmark)."""


@dataclass
class Cluster:
    name: str
    home: Path
    env: dict[str, str]
    port: int
    ray_port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_file(self) -> Path:
        return self.home / ".memcluster" / "memctl.json"

    def state(self) -> dict[str, Any]:
        import json

        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    def processes(self) -> list[int]:
        """Every process this cluster's memctl and Ray head run (they all carry its HOME)."""
        return processes_with_env(f"HOME={self.home}")

    def memory(self) -> str:
        return f"{self.name} keeps its notes in the blue folder"

    def answers(self) -> bool:
        ready = httpx.get(f"{self.base}/readyz", timeout=10).json()
        hits = httpx.post(f"{self.base}/v1/apps/demo/users/alice/memories/search",
                          json={"query": "notes in the blue folder"}, timeout=30).json()["hits"]
        return bool(ready["status"] == "ready" and hits and hits[0]["entry"]["text"] == self.memory())


def _cluster(tmp: Path, name: str, ray_tmpdir: str) -> Cluster:
    home = tmp / name / "home"
    home.mkdir(parents=True)
    env = {**fresh_env(home), "RAY_TMPDIR": ray_tmpdir, "RAY_USAGE_STATS_ENABLED": "0",
           "MEMCLUSTER_EMBEDDER__KIND": "hashing", "MEMCLUSTER_SHARDS": "1"}
    return Cluster(name, home, env, free_port(), free_port())


def _up(c: Cluster, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(MEMCTL), "up", "--data-dir", str(tmp / c.name / "data"), "--port", str(c.port),
                             "--ray-port", str(c.ray_port), "--num-cpus", "2", "--timeout", "300"],
                            env=c.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _reap(c: Cluster) -> None:
    """What a failed test left of this cluster (its own processes only, found by its HOME)."""
    for pid in c.processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster]]:
    tmp = tmp_path_factory.mktemp("neighbours")
    own_tmpdir = tempfile.mkdtemp(prefix="mc", dir="/tmp")  # short: Ray's socket paths live under it
    mine, neighbour = _cluster(tmp, "mine", own_tmpdir), _cluster(tmp, "neighbour", "/tmp")
    ups: list[tuple[Cluster, subprocess.Popen[str]]] = []
    try:
        for c in (neighbour, mine):  # one after the other: two Ray heads starting at once overload 2 cores
            proc = _up(c, tmp)
            ups.append((c, proc))
            out, _ = proc.communicate(timeout=420)
            assert proc.returncode == 0, f"{c.name}: {out}"
            r = httpx.post(f"{c.base}/v1/apps/demo/users/alice/memories", json={"text": c.memory()}, timeout=30)
            assert r.status_code == 201, r.text
        assert mine.answers() and neighbour.answers()
        yield mine, neighbour
    finally:
        for c, proc in ups:
            if proc.poll() is None:
                proc.kill()
            try:
                if c.state_file.exists():
                    memctl("down", env=c.env, timeout=90)
            except subprocess.TimeoutExpired:
                pass  # the test that hung says so; what it left is reaped below
            finally:
                _reap(c)
        shutil.rmtree(own_tmpdir, ignore_errors=True)


def test_up_on_a_ray_port_in_use_says_so_in_one_line(pair: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    mine, neighbour = pair
    home = tmp_path / "home"
    home.mkdir()
    args = ("up", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()), "--ray-port")
    # a Ray head listens on that port here
    env = fresh_env(home)
    here = memctl(*args, str(mine.ray_port), env=env)
    line = one_line(here)
    assert here.returncode != 0 and str(mine.ray_port) in line and "--ray-port" in line, line
    # the same port from another network namespace, in the same Ray temp dir: nothing listens there, but Ray
    # refuses a GCS port that a head on this host uses (and so does memctl, whatever the temp dir)
    script = f"ip link set lo up && exec {MEMCTL} {' '.join(args)} {neighbour.ray_port}"
    netns = subprocess.run(["unshare", "-n", "sh", "-c", script], env={**env, "RAY_TMPDIR": "/tmp"},
                           capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    line = one_line(netns)
    assert netns.returncode != 0 and str(neighbour.ray_port) in line and "--ray-port" in line, line
    assert not (home / ".memcluster" / "memctl.json").exists()
    assert processes_with_env(f"HOME={home}") == []
    assert mine.answers() and neighbour.answers()


def test_a_failed_deploy_stops_only_the_head_it_started(pair: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    _, neighbour = pair
    config = tmp_path / "broken.yaml"
    config.write_text((ROOT / "configs" / "serve.local.yaml").read_text()
                      .replace("serve_apps.builder:build_app", "serve_apps.no_such_module:build_app"))
    home = tmp_path / "home"
    home.mkdir()
    ray_tmpdir = tempfile.mkdtemp(prefix="mc", dir="/tmp")
    try:
        env = {**fresh_env(home), "RAY_TMPDIR": ray_tmpdir, "MEMCLUSTER_EMBEDDER__KIND": "hashing"}
        up = memctl("up", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
                    "--ray-port", str(free_port()), "--num-cpus", "1", env=env, timeout=300)
        assert up.returncode != 0 and "deploy failed; stopped" in up.stderr, up.stdout + up.stderr
        assert processes_with_env(f"HOME={home}") == []
        assert not (home / ".memcluster" / "memctl.json").exists()
        assert neighbour.answers()
    finally:
        for pid in processes_with_env(f"HOME={home}"):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmpdir, ignore_errors=True)


def test_down_stops_only_its_own_cluster(pair: tuple[Cluster, Cluster]) -> None:
    mine, neighbour = pair
    down = memctl("down", env=mine.env, timeout=90)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not mine.state_file.exists()
    assert mine.processes() == [], [command_line(p) for p in mine.processes()]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{mine.base}/healthz", timeout=2)
    assert neighbour.answers()


def describe(pid: int, tag: str) -> str:
    """A left-over process for a failure message: its command line, state, parent, whether it has the tag."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tagged = tag.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError as exc:
        return f"{pid}: {exc}"
    return f"{pid} {command_line(pid)[:3]} state={stat[0]} ppid={stat[1]} tagged={tagged}"


def test_down_with_a_dead_head_is_bounded_and_clears_its_state(pair: tuple[Cluster, Cluster]) -> None:
    _, neighbour = pair
    tag = f"MEMCLUSTER_RAY_TAG={neighbour.state()['ray_tag']}"
    head = [p for p in processes_with_env(tag) if Path(command_line(p)[0]).name in ("gcs_server", "raylet")]
    assert len(head) == 2, [command_line(p) for p in processes_with_env(tag)]
    for pid in head:
        os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    down = memctl("down", env=neighbour.env, timeout=DOWN_BOUND_S + 60)
    took = time.monotonic() - started
    assert down.returncode == 0, down.stdout + down.stderr
    assert took < DOWN_BOUND_S, (took, down.stdout + down.stderr)
    assert not neighbour.state_file.exists()
    assert neighbour.processes() == [], [describe(p, tag) for p in neighbour.processes()]
    again = memctl("down", env=neighbour.env)
    assert again.returncode == 0 and "memctl up" in one_line(again)
