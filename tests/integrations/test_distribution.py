"""The client distribution on its own: ``memcluster-client`` built from memclient/ into a fresh venv
pulls httpx (and httpx's own dependencies) and nothing else; each integration imports only with its
extra installed (an ImportError naming the extra otherwise); ``[langgraph]`` adds LangGraph. The
stdio MCP server ``memcluster-mcp`` is installed as a console script: without ``[mcp]`` it says to
install that extra; with it, it starts and fails naming the URL when no service answers.

Needs PyPI (httpx, langgraph come from the index): skipped, saying so, when it is unreachable
(e.g. inside ``unshare -n``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

LIST_DISTS = """
import importlib.metadata as md, json, re
names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in md.distributions()}
def closure(name, seen):
    if name in seen:
        return seen
    seen.add(name)
    for req in md.distribution(name).requires or []:
        if "extra ==" in req:
            continue
        dep = re.split(r"[ ;<>=!~\\[(]", req, maxsplit=1)[0]
        dep = re.sub(r"[-_.]+", "-", dep).lower()
        if dep in names:
            closure(dep, seen)
    return seen
print(json.dumps({"installed": sorted(names), "httpx": sorted(closure("httpx", set()))}))
"""


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the venv has installed
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600, cwd=cwd or Path("/"), env=env)


def test_fresh_venv_gets_httpx_only_and_extras_gate_the_integrations(tmp_path: Path) -> None:
    if not _pypi_reachable():
        pytest.skip("PyPI is unreachable here; this test installs httpx and langgraph from it")
    src = tmp_path / "src"
    shutil.copytree(ROOT / "memclient", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src),
                 "-w", str(tmp_path / "wheels"))
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheels").glob("memcluster_client-*.whl")

    venv = tmp_path / "venv"
    base_python = str(Path(sys.base_prefix) / "bin" / "python3")
    assert _run(base_python, "-m", "venv", str(venv)).returncode == 0
    py = str(venv / "bin" / "python")
    installed = _run(py, "-m", "pip", "install", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr
    dists = json.loads(_run(py, "-c", LIST_DISTS).stdout)
    tooling = {"pip", "setuptools", "wheel"}
    assert set(dists["installed"]) - tooling == {"memcluster-client", *dists["httpx"]}
    assert "httpx" in dists["httpx"]

    # the client works from there (no server needed to build requests; an unreachable one raises)
    where = _run(py, "-c", "import memclient; print(memclient.__file__)").stdout
    assert where.startswith(str(venv)), where
    probe = _run(py, "-c", "from memclient import MemoryClient, Unreachable\n"
                           "try:\n    MemoryClient('http://127.0.0.1:9', timeout=2).healthz()\n"
                           "except Unreachable as e:\n    print('unreachable', e.status)")
    assert probe.stdout.strip() == "unreachable None", probe.stderr

    for module, extra in [("langgraph", "langgraph"), ("openai_agents", "openai-agents"), ("trpc", "trpc"),
                          ("trpc_mempalace", "trpc")]:
        missing = _run(py, "-c", f"import memclient.integrations.{module}")
        assert missing.returncode != 0
        assert f'pip install "memcluster-client[{extra}]"' in missing.stderr, missing.stderr

    script = str(venv / "bin" / "memcluster-mcp")
    no_sdk = _run(script, "--app", "demo", "--user", "alice", "--url", "http://127.0.0.1:9")
    assert no_sdk.returncode == 1 and 'pip install "memcluster-client[mcp]"' in no_sdk.stderr, no_sdk.stderr
    with_mcp = _run(py, "-m", "pip", "install", "-q", f"{wheel}[mcp]")
    assert with_mcp.returncode == 0, with_mcp.stderr
    assert "--app" in _run(script, "--help").stdout
    gone = _run(script, "--app", "demo", "--user", "alice", "--url", "http://127.0.0.1:9")
    assert gone.returncode == 1 and "memcluster at http://127.0.0.1:9: not reachable" in gone.stderr, gone.stderr

    with_extra = _run(py, "-m", "pip", "install", "-q", f"{wheel}[langgraph]")
    assert with_extra.returncode == 0, with_extra.stderr
    assert _run(py, "-c", "from memclient.integrations.langgraph import MemclusterStore").returncode == 0
    assert "memcluster-client[openai-agents]" in _run(py, "-c", "import memclient.integrations.openai_agents").stderr
    assert _run(py, "-m", "pip", "check").returncode == 0
