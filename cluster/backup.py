"""``memctl export`` / ``memctl import``: back up and restore one app's memories over HTTP.

Both talk to a running service (``--url``, else ``MEMCLUSTER_URL``, else the URL ``memctl up``
recorded, else http://127.0.0.1:8000) with the app's key (``--api-key``, else
``MEMCLUSTER_API_KEY``; prefer the environment: a flag shows in the process list).

- export streams ``GET /v1/apps/{app}/export`` into a temporary file next to ``--out`` and
  renames it into place only when the whole stream arrived (``--out -`` writes to stdout);
- import validates the whole file here first (the same checks as the server: every line an
  entry of this app, canonical ids, no repeats), then posts it in pieces of at most
  ``--chunk-bytes`` cut at line boundaries (the server validates each piece again before
  writing it). Re-running an import is safe: a restore replaces entries by id.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx

from memcore.backup import parse_jsonl
from memcore.errors import ValidationError
from memcore.vocabulary import DEFAULT_PORT

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
URL_HELP = (f"service base URL (default $MEMCLUSTER_URL, then the URL `memctl up` recorded, then "
            f"{DEFAULT_URL})")
"""The ``--url`` flag's help, the same for every memctl command that calls the service."""
DEFAULT_CHUNK_BYTES = 16 * 1024 * 1024
TIMEOUT = httpx.Timeout(30.0, read=600.0)


class BackupError(Exception):
    """A failed export or import, with a message for the operator."""


def base_url(flag: str | None, state: dict[str, Any] | None = None) -> str:
    url = flag or os.environ.get("MEMCLUSTER_URL") or (state or {}).get("base_url") or DEFAULT_URL
    return str(url).rstrip("/")


def api_key(flag: str | None) -> str | None:
    return flag or os.environ.get("MEMCLUSTER_API_KEY") or None


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _app_url(url: str, app: str, what: str) -> str:
    return f"{url}/v1/apps/{quote(app, safe='')}/{what}"


def _failure(r: httpx.Response) -> BackupError:
    try:
        body = r.json()
        detail = f"{body.get('error')}: {body.get('message')}"
    except ValueError:
        detail = r.text[:500]
    return BackupError(f"HTTP {r.status_code} {detail}")


def export_app(url: str, key: str | None, app: str, out: str) -> tuple[int, int]:
    """Write the app's JSONL export to ``out`` (``-``: stdout); returns (lines, users)."""
    with httpx.Client(timeout=TIMEOUT, headers=_headers(key)) as client, \
            client.stream("GET", _app_url(url, app, "export")) as r:
        if r.status_code != 200:
            r.read()
            raise _failure(r)
        users = int(r.headers.get("X-Memcluster-Users", "0") or 0)
        if out == "-":
            return _copy(r.iter_bytes(), sys.stdout.buffer), users
        target = Path(out)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent or ".")
        try:
            with os.fdopen(fd, "wb") as fh:
                lines = _copy(r.iter_bytes(), fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return lines, users


def _copy(chunks: Iterator[bytes], sink: IO[bytes]) -> int:
    lines = 0
    for chunk in chunks:
        sink.write(chunk)
        lines += chunk.count(b"\n")
    return lines


def _pieces(lines: list[bytes], limit: int) -> Iterator[bytes]:
    piece: list[bytes] = []
    size = 0
    for line in lines:
        if piece and size + len(line) + 1 > limit:
            yield b"\n".join(piece) + b"\n"
            piece, size = [], 0
        piece.append(line)
        size += len(line) + 1
    if piece:
        yield b"\n".join(piece) + b"\n"


def import_app(
    url: str, key: str | None, app: str, path: str, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> dict[str, int]:
    """Validate ``path`` (``-``: stdin), then restore it into ``app``; returns the summed counts."""
    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        users = {entry.user for entry in parse_jsonl(data, app)}
    except ValidationError as exc:
        raise BackupError(f"{path}: {exc.message}") from None
    lines = [line for line in data.split(b"\n") if line.strip()]
    totals = {"entries": 0, "active": 0, "deleted": 0}
    with httpx.Client(timeout=TIMEOUT, headers={**_headers(key), "Content-Type": "application/x-ndjson"}) as client:
        for piece in _pieces(lines, max(1024, chunk_bytes)):
            r = client.post(_app_url(url, app, "import"), content=piece)
            if r.status_code != 200:
                raise _failure(r)
            body = r.json()
            for name in totals:
                totals[name] += int(body[name])
    return {**totals, "users": len(users)}
