"""How memctl finds and stops the processes of its own Ray head (:mod:`cluster.ray_head`), with plain
processes standing in for nothing: the selection works on ``/proc`` (environment, command line,
parents) and real signals. The real heads side by side are in ``test_memctl_neighbours``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster import ray_head
from tests.conftest import free_port

SLEEPER = """
import signal, subprocess, sys, time
if "deaf" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "parent" in sys.argv:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={})
time.sleep(120)
"""
"""A process that sleeps; ``deaf``: ignores SIGTERM; ``parent``: starts a child with an empty environment."""


Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    started: list[subprocess.Popen[bytes]] = []

    def run(*args: str, tag: str | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != ray_head.TAG_VAR}
        if tag:
            env[ray_head.TAG_VAR] = tag
        proc = subprocess.Popen([sys.executable, "-c", SLEEPER, *args], env=env)
        started.append(proc)
        return proc

    yield run
    for proc in started:
        for pid in [proc.pid, *_children(proc.pid)]:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        proc.wait()


def _children(pid: int) -> list[int]:
    kids = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(p.name))
        except (OSError, IndexError, ValueError):
            continue
    return kids


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_children(pid: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = _children(pid)
        if kids:
            return kids
        time.sleep(0.1)
    raise AssertionError(f"{pid} started no child")


def test_stop_stops_the_tagged_processes_their_children_and_its_session_only(spawn: Spawn, tmp_path: Path) -> None:
    session = tmp_path / "ray" / "session_2026-01-01_00-00-00_000001_42"
    deaf = spawn("deaf", tag="mine")  # ignores SIGTERM: SIGKILL follows
    parent = spawn("parent", tag="mine")
    (child,) = _wait_children(parent.pid)  # its environment is empty: found as a descendant
    named = spawn(f"--session-dir={session}")  # no tag, but names the session dir
    neighbour = spawn(tag="theirs")
    similar = spawn(f"--session-dir={session}3", f"--log_dir={session}3/logs")  # another session, same prefix
    head = ray_head.Head("mine", "127.0.0.1:1", str(session))
    assert set(ray_head.processes(head)) == {deaf.pid, parent.pid, child, named.pid}
    assert ray_head.stop(head) == 4
    assert deaf.wait(timeout=5) == -9 and parent.wait(timeout=5) != 0 and named.wait(timeout=5) != 0
    assert not _running(child)
    assert neighbour.poll() is None and similar.poll() is None
    assert ray_head.processes(head) == []


def test_the_head_is_found_from_its_state_and_is_not_alive_without_its_gcs_and_raylet() -> None:
    state = {"gcs": "127.0.0.1:6390", "ray_tag": "abc", "ray_session_dir": "/tmp/r/ray/session_x",
             "ray_pids": {"gcs_server": 1, "raylet": 2}, "base_url": "http://127.0.0.1:8000"}
    head = ray_head.Head.from_state(state)
    assert head is not None and head.to_state() == {**{k: state[k] for k in ("gcs", "ray_tag", "ray_session_dir",
                                                                           "ray_pids")}, "ray_temp_dir": "/tmp/r/ray"}
    assert not head.alive()  # PIDs 1 and 2 do not carry its tag
    assert ray_head.Head.from_state({"gcs": "127.0.0.1:6390", "started_ray": False, "ray_tag": "x"}) is None


def test_a_ray_port_something_listens_on_is_busy() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        reason = ray_head.busy_reason(port)
        assert reason is not None and str(port) in reason
        with pytest.raises(ray_head.RayStartError, match=rf"Ray port {port} .*--ray-port"):
            ray_head.start(port, dict(os.environ), Path("/nonexistent/ray-start.log"))
    assert ray_head.busy_reason(free_port()) is None
