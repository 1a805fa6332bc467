"""memcluster's HTTP app (LocalShardBackend, hashing embedder) in its own process, for clients whose
environment cannot host the server (trpc-agent-py's overlay has mcp 1, the server needs mcp 2).

``python -m tests.integrations.server_process DATA_DIR`` prints the base URL on one line and serves
until its stdin closes; :func:`server_process` runs it with another interpreter and yields the URL.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def server_python() -> str:
    """The interpreter of the environment an overlay sits on (``scripts/trpc-venv`` records it: it can import
    the server), else this one."""
    marker = Path(sys.prefix) / "memcluster-base-python"
    return marker.read_text().strip() if marker.exists() else sys.executable


@contextmanager
def server_process(python: str, data_dir: Path, cwd: Path) -> Iterator[str]:
    proc = subprocess.Popen([python, "-m", "tests.integrations.server_process", str(data_dir)], cwd=cwd,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the memcluster server process did not start (exit {proc.poll()})")
        yield url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(data_dir: str) -> None:
    from memcore.stores.embedders import HashingEmbedder
    from memcore.vocabulary import GRAPH_TOOLS
    from tests.serve_apps.conftest import serve_local

    graph_on = {"enabled": dict.fromkeys(GRAPH_TOOLS, True)}  # the MemPalace tools (test_trpc_mempalace)
    with serve_local(Path(data_dir), HashingEmbedder(dim=256), tools=graph_on) as served:
        print(served.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1])
