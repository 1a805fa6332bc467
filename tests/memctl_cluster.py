"""memcluster as a new user runs it: ``memctl up`` (the local Ray cluster, Serve ingress, shard actors,
the packaged embedder) with an empty ``HOME``, stopped with ``memctl down``. For tests whose client
environment cannot host the server (the trpc-agent-py overlay) and for the first-run test."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def fresh_env(home: Path) -> dict[str, str]:
    """The environment of a new user: an empty HOME, none of the suite's Ray or memctl variables."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("RAY_", "MEMCTL_", "MEMCLUSTER_")) and k != "HOME"}
    return {**keep, "HOME": str(home)}


def memctl(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The server environment's ``memctl`` (``.venv``), whichever interpreter runs the test."""
    return subprocess.run([str(ROOT / ".venv" / "bin" / "memctl"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)


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
