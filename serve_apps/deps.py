"""What the route modules share: path parameters, the documented error responses, the attached
backend and settings, the typed shard client, JSON and header helpers. Public names only; the
route modules (:mod:`serve_apps.http.app`, :mod:`serve_apps.http.ingest`,
:mod:`serve_apps.http.backup`, :mod:`serve_apps.http.erasure`) import from here and never from each other.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request
from pydantic import BaseModel

from actors.backend import ShardBackend
from actors.shard_client import ShardClient
from memcore.errors import StoreError
from memcore.fields import MAX_ID_CHARS
from memcore.settings import Settings
from serve_apps.http.models import ErrorBody

SEQ_HEADER = "X-Memcluster-Seq"
TIMING_HEADER = "Server-Timing"

_URL_RULE = "nothing a URL would change: not '.' or '..', no '/', nor their percent-encoded forms"
App = Annotated[str, Path(description=f"Application id (1..{MAX_ID_CHARS} characters, no control characters, "
                                      f"{_URL_RULE}).")]
User = Annotated[str, Path(description=f"User id within the app (1..{MAX_ID_CHARS} characters, no control "
                                       f"characters, {_URL_RULE}).")]
MemoryId = Annotated[str, Path(description=f"A memory id ({_URL_RULE}).")]
Hard = Annotated[bool | None, Query(description="true: remove for good; false: soft-delete; default: the "
                                                  "service setting.")]
PurgeSources = Annotated[bool, Query(description="true: also remove (hard) or hide (soft) every archived turn "
                                                 "the deleted memories came from, even one that still feeds a "
                                                 "live memory (a clear: every archived turn of the user).")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (401, "Missing or unknown API key"),
        (403, "The key belongs to another app, or the tool is disabled"),
        (413, "Request body too large"),
        (422, "Invalid input; `field` names it"),
        (503, "A store failed or the service is not ready; retry (Retry-After)"),
    )
}
_EXTRA = {404: "Unknown or deleted memory", 409: "The update would rotate onto an active memory"}


def errors(*extra: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route (``extra``: 404 and/or 409 as well)."""
    out = dict(_ERRORS)
    for code in extra:
        out[code] = {"model": ErrorBody, "description": _EXTRA[code]}
    return out


def state(request: Request) -> tuple[ShardBackend, Settings]:
    """The backend and settings :func:`serve_apps.http.access.attach` gave the app (503 until then)."""
    backend = getattr(request.app.state, "backend", None)
    settings = getattr(request.app.state, "settings", None)
    if backend is None or settings is None:
        raise StoreError("the service is starting: no shard backend attached yet", field="backend")
    return backend, settings


def shards(request: Request) -> ShardClient:
    """The typed shard client over the attached backend."""
    backend, _ = state(request)
    return ShardClient(backend)


def to_json(value: Any) -> Any:
    """Models (and lists of them) as JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def seq_headers(seq: int | None) -> dict[str, str]:
    """``X-Memcluster-Seq``: a write's place in the user's FIFO."""
    return {SEQ_HEADER: str(seq)} if seq is not None else {}
