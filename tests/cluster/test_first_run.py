"""A new user's first hour, as the README tells it: on a machine whose home directory is empty, the
README's run command (``./scripts/run`` itself, in a subprocess) starts memcluster, the README's curl
walk-through runs command for command, a second ``up`` and a busy port each say so in one line, and
``memctl down`` stops every process ``up`` started. Every other memctl command on a fresh home either
works or says in one line what to run first."""

from __future__ import annotations

import argparse
import json
import re
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.memctl_cluster import command_line, fresh_env, memctl, one_line, processes_with_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEPLOYMENT = ROOT / "docs" / "deployment.md"
WALKTHROUGH = re.compile(r"<!-- walkthrough:.*?-->(.*?)<!-- /walkthrough -->", re.S)


def walkthrough_blocks() -> list[str]:
    (section,) = WALKTHROUGH.findall(README.read_text())
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def test_readme_walkthrough_is_what_the_test_runs() -> None:
    blocks = walkthrough_blocks()
    assert len(blocks) == 4
    assert all(b.lstrip().startswith("curl -s -X POST http") or b.lstrip().startswith("curl -s -X POST 'http")
               for b in blocks)
    assert '"events": [{"role": "user", "content": "I moved to Lisbon last month."}' in blocks[1]
    assert '"id"' not in blocks[1] and "timestamp" not in blocks[1]  # a plain chat history


def up_flags() -> set[str]:
    from cluster.cli import parser

    (sub,) = (a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices["up"]._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


@pytest.mark.parametrize(("doc", "opening"), [(README, "Flags of `memctl up`"), (DEPLOYMENT, "Its flags are")])
def test_the_docs_list_every_flag_of_memctl_up(doc: Path, opening: str) -> None:
    paragraph = doc.read_text().split(opening, 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(--[a-z-]+)", paragraph))
    assert listed == up_flags()


def test_memctl_on_a_fresh_home_works_or_says_what_to_run_first(tmp_path: Path) -> None:
    env = fresh_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    status = memctl("status", env=env)
    assert status.returncode == 1 and "memctl up" in one_line(status)
    down = memctl("down", env=env)
    assert down.returncode == 0 and "memctl up" in one_line(down)
    export = memctl("export", "--app", "demo", "--out", str(tmp_path / "x.jsonl"), "--url",
                    f"http://127.0.0.1:{free_port()}", env=env)
    assert export.returncode == 1 and "memctl up" in one_line(export)
    assert not (tmp_path / "x.jsonl").exists()
    nowhere = f"http://127.0.0.1:{free_port()}"
    for args in (("forget", "--app", "demo", "--user", "alice", "--url", nowhere), ("compact", "--url", nowhere)):
        erase = memctl(*args, env=env)
        assert erase.returncode == 1 and "memctl up" in one_line(erase), args
    for args in (("backfill", "--locomo", str(tmp_path / "none.json"), "--app", "demo"), ("reextract", "--list")):
        job = memctl(*args, env=env)
        assert job.returncode != 0 and "memctl up" in one_line(job), args


@pytest.mark.slow
def test_the_readme_on_a_fresh_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = fresh_env(home)
    port, ray_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    run = subprocess.run([str(ROOT / "scripts" / "run"), "--data-dir", str(tmp_path / "data"), "--port", str(port),
                          "--ray-port", str(ray_port), "--num-cpus", "2", "--timeout", "240"],
                         env=env, capture_output=True, text=True, timeout=400, check=False, cwd=ROOT)
    state: dict[str, Any] = {}
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"memcluster is up: {base}" in run.stdout
        state = json.loads((home / ".memcluster" / "memctl.json").read_text())
        token = home / ".memcluster" / "ray_auth_token"
        assert token.read_text() and stat.S_IMODE(token.stat().st_mode) == 0o600
        status = memctl("status", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        shown = json.loads(status.stdout)
        assert shown["ray_auth"] == {"mode": "token", "token_file": str(token)}
        assert shown["readyz"]["status"] == "ready"

        outputs = [_curl(block, port, env) for block in walkthrough_blocks()]
        added, ingested, searched, preloaded = outputs
        assert added["text"] == "Never schedule meetings before 10am"
        assert ingested["status"] == "done" and ingested["counts"]["applied"] == 2, ingested
        texts = [h["entry"]["text"] for h in searched["hits"]]
        assert "User: I moved to Lisbon last month." in texts, texts
        assert "Never schedule meetings before 10am" in preloaded["text"]
        assert "Lisbon" in preloaded["text"]

        again = memctl("up", "--data-dir", str(tmp_path / "data"), "--port", str(port), env=env)
        assert again.returncode == 0 and "already running" in one_line(again)
        other_home = tmp_path / "other-home"
        other_home.mkdir()
        busy = memctl("up", "--data-dir", str(tmp_path / "other"), "--port", str(port), "--ray-port",
                      str(free_port()), env=fresh_env(other_home))
        assert busy.returncode == 1 and f"port {port}" in one_line(busy)
        assert not (other_home / ".memcluster" / "memctl.json").exists()

        before = processes_with_env(f"HOME={home}")
        unowned = _unowned(home, state)
        assert unowned == [], [command_line(p) for p in unowned]
        commands = [" ".join(command_line(p)) for p in before]
        assert any("ray.util.client.server" in c for c in commands), commands
        assert any("raylet" in c for c in commands) and any("gcs_server" in c for c in commands), commands
    finally:
        down = memctl("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "data kept" in down.stdout
    left = processes_with_env(f"HOME={home}")
    assert left == [], [command_line(p) for p in left]
    assert not (home / ".memcluster" / "memctl.json").exists()


def _unowned(home: Path, state: dict[str, Any], settle_s: float = 10.0) -> list[int]:
    """The processes of this memctl home that ``memctl down`` would not stop (:func:`cluster.ray_head.processes`:
    its head's tag, its session directory, their descendants; Ray starts some agents with an environment of its
    own), and that stay: one starting or ending while ``/proc`` was read is read again."""
    from cluster import ray_head

    head = ray_head.Head.from_state(state)
    assert head is not None
    deadline = time.monotonic() + settle_s
    while True:
        left = sorted(set(processes_with_env(f"HOME={home}")) - set(ray_head.processes(head)))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _curl(block: str, port: int, env: dict[str, str]) -> Any:
    command = block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    out = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)
