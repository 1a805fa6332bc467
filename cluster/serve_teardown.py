"""Delete the Serve apps and shard actors of the head ``memctl down`` stops, within a bound.

:func:`cluster.deploy.shutdown` connects a Ray driver to the head. When the head is half gone (its GCS
still answers, its raylet does not) ``ray.init`` waits inside Ray's C++ code, where no Python signal
handler runs: ``memctl down`` would wait with it and not even stop on SIGTERM. So the teardown runs in
a child process (``python -m cluster.serve_teardown GCS NAMESPACE SECONDS``) that the parent waits for
at most ``SECONDS`` and then kills; the child also arms ``SIGALRM`` for the same time, so it ends by
itself when ``memctl down`` was stopped meanwhile.
"""

from __future__ import annotations

import signal
import subprocess
import sys

TIMEOUT_S = 60
"""How long a live head may take to delete its apps and shard actors (seconds)."""


def run(gcs: str, namespace: str, timeout_s: int = TIMEOUT_S) -> bool:
    """True when the teardown finished within ``timeout_s``; the head's processes are stopped either way."""
    cmd = [sys.executable, "-m", "cluster.serve_teardown", gcs, namespace, str(timeout_s)]
    try:
        return subprocess.run(cmd, timeout=timeout_s + 5, check=False, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def main(argv: list[str]) -> int:
    gcs, namespace, limit = argv
    signal.alarm(int(limit))  # SIGALRM's default action ends the process, also inside Ray's C++ code
    from cluster.deploy import shutdown

    shutdown(gcs, namespace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
