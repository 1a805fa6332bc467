"""Backup routes: export and import one app's memories as JSON Lines (module-level routers).

::

    GET  /v1/apps/{app}/export   200 application/x-ndjson: one entry per line (memcore.backup format),
                                 every user of the app on every shard, tombstones included, ordered
                                 by user then id; ``X-Memcluster-Users`` says how many users follow
    POST /v1/apps/{app}/import   a JSONL body (up to ``settings.http.max_import_bytes``, 64 MiB by
                                 default): every line is validated first; a bad line or a line of
                                 another app is 422 naming ``lines.<n>.<field>`` and nothing is written;
                                 then each user's entries are restored as they are, in the user's FIFO:
                                 200 {"app", "entries", "users", "active", "deleted"}

The key must open the app in the path. An import merges: entries with the same id are replaced,
others are kept. A store failure during an import (503) may leave part of it written; retrying the
same file is safe (a restore is idempotent). A shard failing in the middle of an export cuts the
stream short (the response then ends without its final chunk, which HTTP clients report).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from memcore.backup import encode_line, parse_jsonl
from memcore.model import Entry
from memcore.validation import make_key
from serve_apps.deps import App, errors, shards, state
from serve_apps.http.access import scoped_router

JSONL = "application/x-ndjson"
USERS_HEADER = "X-Memcluster-Users"
EXPORT_PREFETCH = 4
"""Users whose entries are fetched ahead of the one being streamed."""
IMPORT_CONCURRENCY = 8
"""Users restored at the same time."""
RESTORE_CHUNK = 500
"""Entries per shard call of an import (bounds one message and one turn of the user's FIFO)."""
_TAGS = ["backups"]

router = scoped_router()
"""Routes under ``/v1/apps/{app}`` (the key must open ``app``)."""


class ImportResponse(BaseModel):
    """What an import wrote."""

    app: str
    entries: int = Field(description="Entries restored (active and tombstones).")
    users: int = Field(description="Distinct users among them.")
    active: int = Field(description="Entries restored as active memories.")
    deleted: int = Field(description="Entries restored as soft-delete tombstones.")


_EXPORT_DOC: dict[str, Any] = {
    "responses": {"200": {"content": {JSONL: {"schema": {"type": "string", "description": "One EntryModel JSON "
                                                          "object per line."}}}}},
}
_IMPORT_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {JSONL: {"schema": {"type": "string", "description": "One EntryModel JSON object per line, "
                                       "as the export route writes it (blank lines are skipped)."}}},
    },
}


@router.get("/v1/apps/{app}/export", response_class=StreamingResponse, responses=errors(),
            openapi_extra=_EXPORT_DOC, summary="Export an app's memories", tags=list(_TAGS))
async def export_app(request: Request, app: App) -> Response:
    """Every memory of every user of the app, soft-deleted ones included, as JSON Lines ordered by
    user then id: the input of the import route (a restore of it round-trips exactly). Expired entries
    are not in it, and an app whose memory is off exports nothing (an export is a read)."""
    make_key(app, "export")  # validates the app id (422 naming `app`)
    _, settings = state(request)
    client = shards(request)
    per_shard = await asyncio.gather(*(client.export_users(k, app)
                                       for k in range(settings.shards)))
    users = sorted({u for shard_users in per_shard for u in shard_users})

    async def lines() -> AsyncIterator[bytes]:
        todo = iter(users)
        pending: deque[asyncio.Future[Any]] = deque()

        def fill() -> None:
            while len(pending) < EXPORT_PREFETCH and (user := next(todo, None)) is not None:
                pending.append(asyncio.ensure_future(client.export(make_key(app, user))))

        try:
            fill()
            while pending:
                entries: list[Entry] = await pending.popleft()
                fill()
                if entries:
                    yield "".join(encode_line(e) for e in entries).encode("ascii")
        finally:
            for task in pending:
                task.cancel()

    return StreamingResponse(lines(), media_type=JSONL,
                             headers={USERS_HEADER: str(len(users)), "Cache-Control": "no-store"})


@router.post("/v1/apps/{app}/import", response_model=ImportResponse, responses=errors(),
             openapi_extra=_IMPORT_DOC, summary="Import an app's memories", tags=list(_TAGS))
async def import_app(request: Request, app: App) -> Response:
    """Restore a JSONL export of this app: ids, timestamps and tombstones are kept, vectors recomputed.
    Every line is validated before anything is written (422 names `lines.<n>.<field>`); an app whose
    memory is off refuses it (403 naming `app`, before the body is read)."""
    make_key(app, "import")
    _, settings = state(request)
    settings.policy(app).check_writes()
    client = shards(request)
    body = await request.body()
    entries = await asyncio.to_thread(parse_jsonl, body, app)
    by_user: dict[str, list[Entry]] = {}
    for entry in entries:
        by_user.setdefault(entry.user, []).append(entry)
    gate = asyncio.Semaphore(IMPORT_CONCURRENCY)

    async def restore(user: str, items: list[Entry]) -> None:
        key = make_key(app, user)
        async with gate:
            for start in range(0, len(items), RESTORE_CHUNK):
                await client.restore(key, items[start : start + RESTORE_CHUNK])

    tasks = [asyncio.ensure_future(restore(u, items)) for u, items in sorted(by_user.items())]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    active = sum(1 for e in entries if e.active)
    return JSONResponse({"app": app, "entries": len(entries), "users": len(by_user), "active": active,
                         "deleted": len(entries) - active})
