"""A private PostgreSQL server for tests and benchmarks: ``initdb`` in a temporary directory, ``pg_ctl``
on 127.0.0.1 at a given port, run as the ``postgres`` system user (PostgreSQL refuses to run as root).

The binaries are taken from ``PATH`` or Debian's ``/usr/lib/postgresql/<version>/bin`` (package
``postgresql-15``, which ``scripts/test`` installs when ``initdb`` is missing). Trust authentication
on loopback only; ``fsync`` stays on (the tests stop and restart it and expect commits to survive).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

_SYSTEM_USER = "postgres"


def pg_bin(name: str) -> str | None:
    """The path of PostgreSQL's ``name`` binary, or None when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    return None


def available() -> bool:
    """Whether a private server can be started here (binaries installed, a ``postgres`` user, root to
    switch to it, or running as that user already)."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        return False
    try:
        import pwd

        pwd.getpwnam(_SYSTEM_USER)
    except KeyError:
        return False
    return os.geteuid() == 0 and shutil.which("runuser") is not None


def _any_free_port() -> int:
    """A loopback port free now, by ``bind(0)`` (the tests pass a port from their own range instead)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """``with PostgresServer(port) as pg: pg.dsn`` — started on enter, stopped and removed on exit;
    :meth:`stop` and :meth:`start` in between stop and restart the same cluster (its data kept)."""

    def __init__(self, port: int | None = None, *, root: str | None = None) -> None:
        self.port = port if port is not None else _any_free_port()
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir=root))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.running = False
        os.chmod(self.root, 0o755)
        shutil.chown(self.root, _SYSTEM_USER, _SYSTEM_USER)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *argv: str, timeout: float = 120) -> None:
        cmd = ["runuser", "-u", _SYSTEM_USER, "--", *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}\n{log}")

    def init(self) -> None:
        initdb = pg_bin("initdb")
        assert initdb is not None, "initdb is not installed (Debian: apt-get install postgresql-15)"
        self._as_postgres(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                          "--locale=C.UTF-8", "--no-sync")

    def start(self) -> None:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=200"
                " -c shared_buffers=32MB")
        self._as_postgres(pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        self._as_postgres(pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def __enter__(self) -> PostgresServer:
        try:
            self.init()
            self.start()
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
