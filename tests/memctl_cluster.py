"""memcluster as a new user runs it: ``memctl up`` (the local Ray cluster, Serve ingress, shard actors,
the packaged embedder) with an empty ``HOME``, stopped with ``memctl down``. For tests whose client
environment cannot host the server (the trpc-agent-py overlay), the first-run test and the tests of
memctl next to other clusters on the same host."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
MEMCTL = ROOT / ".venv" / "bin" / "memctl"


def fresh_env(home: Path) -> dict[str, str]:
    """The environment of a new user: an empty HOME, none of the suite's Ray or memctl variables."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("RAY_", "MEMCTL_", "MEMCLUSTER_")) and k != "HOME"}
    return {**keep, "HOME": str(home)}


def memctl(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The server environment's ``memctl`` (``.venv``), whichever interpreter runs the test."""
    return subprocess.run([str(MEMCTL), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a memctl command printed (fails the test when it printed more, or nothing)."""
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()
             and "network_util.cc" not in line]  # Ray's own warning inside a network namespace
    assert len(lines) == 1, proc.stdout + proc.stderr
    return lines[0]


def processes_with_env(entry: str) -> list[int]:
    """Processes on this host whose environment holds ``entry`` (``NAME=value``), read from ``/proc``:
    what a memctl home (``HOME=...``) or one Ray head (its tag) left running, whichever network
    namespace they are in."""
    found = []
    needle = entry.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(proc.name))
    return sorted(found)


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@contextmanager
def memctl_cluster(tmp: Path) -> Iterator[str]:
    """``memctl up`` on free ports with ``tmp/home`` as HOME and ``tmp/data`` as data dir; yields the
    base URL; ``memctl down`` afterwards (also when the test fails)."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = fresh_env(home)
    port, ray_port = free_port(), free_port()
    up = memctl("up", "--data-dir", str(tmp / "data"), "--port", str(port), "--ray-port", str(ray_port),
                "--num-cpus", "2", "--timeout", "240", env=env, timeout=400)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield f"http://127.0.0.1:{port}"
    finally:
        memctl("down", env=env)
