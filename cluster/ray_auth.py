"""Ray's token authentication for the local cluster ``memctl up`` starts, on a machine with nothing
in the home directory.

Ray (2.5x+) turns token auth on for the clusters it starts and then refuses every client that has
no token. memctl keeps one token per memctl home (``~/.memcluster/ray_auth_token``, owner-only,
created on first use) and points Ray at it with ``RAY_AUTH_TOKEN_PATH`` in its own environment, so
``ray start``, every Ray process it spawns and every later ``memctl`` command (deploy, status, jobs,
down) use the same file. What the user set wins: ``RAY_AUTH_MODE=disabled`` (no token),
``RAY_AUTH_TOKEN`` (the token itself) or ``RAY_AUTH_TOKEN_PATH`` (a token file, created if missing).
Another Ray client reaches the cluster with ``RAY_AUTH_TOKEN_PATH=<that file>``; ``memctl status``
prints it.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"
TOKEN_FILE = "ray_auth_token"


@dataclass(frozen=True)
class RayAuth:
    mode: str
    """``token`` or ``disabled``."""
    token_file: Path | None = None
    """Where the token lives (None: disabled, or given in ``RAY_AUTH_TOKEN``)."""
    created: bool = False

    def describe(self) -> dict[str, str | None]:
        source = "RAY_AUTH_TOKEN" if self.mode == "token" and self.token_file is None else None
        return {"mode": self.mode, "token_file": str(self.token_file) if self.token_file else source}


def write_token(path: Path) -> bool:
    """Create ``path`` with a new random token, readable by its owner only; False when it exists."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return True


def ensure(home: Path, environ: dict[str, str] | None = None) -> RayAuth:
    """Decide the auth mode, create the token file if needed, and set the variables Ray reads in
    ``environ`` (default ``os.environ``: inherited by ``ray start`` and Ray's own processes)."""
    env = os.environ if environ is None else environ
    if env.get(MODE_VAR, "").lower() == "disabled":
        return RayAuth("disabled")
    env[MODE_VAR] = "token"
    if env.get(TOKEN_VAR) and not env.get(TOKEN_PATH_VAR):
        return RayAuth("token")
    path = Path(env.get(TOKEN_PATH_VAR) or home / TOKEN_FILE).expanduser()
    created = write_token(path)
    env[TOKEN_PATH_VAR] = str(path)
    return RayAuth("token", path, created)
