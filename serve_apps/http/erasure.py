"""Erasure routes: forget a user, compact the stores (module-level routers).

::

    DELETE /v1/apps/{app}/users/{user}   erase the user completely; 200 with the counts removed
    DELETE /v1/apps/{app}/users/{user}/sessions/{session}
                                         remove the session's archived turns (hard) and the memories
                                         made only from them; 200 {"session", "events", "entries"}
    DELETE /v1/apps/{app}/users/{user}/sessions/{session}/events/{event_id}
                                         the same for one turn; 404 when the session holds no such turn
    POST   /v1/admin/compact             rewrite every shard's stores and archive without deleted
                                         data (any valid key; open when no keys are configured);
                                         200 {"shards": [...]} once every shard is done

What each removes, and when the bytes leave the disk, is ``docs/deployment.md``'s "Erasure and
retention" section.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Path, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from memcore.errors import NotFoundError
from memcore.validation import check_session, make_key
from serve_apps.deps import App, User, errors, seq_headers, shards, state, to_json
from serve_apps.http.access import USER_PREFIX, key_router, scoped_router

SessionPath = Annotated[str, Path(description="The session id.")]


class ForgetResponse(BaseModel):
    """What erasing one user removed."""

    app: str
    user: str
    entries: int = Field(description="Entries removed from the serving generation (tombstones included).")
    other_generation_entries: int = Field(description="Entries removed from a re-extraction's staging "
                                                      "generation and from retired generations.")
    events: int = Field(description="Archived turns removed (with their recall index rows).")
    sessions: int = Field(description="Session cursors removed.")
    jobs: int = Field(description="Extraction job records removed.")
    access_records: int = Field(description="TTL access times removed.")
    facts: int = Field(default=0, description="Knowledge-graph fact versions removed.")
    diary_entries: int = Field(default=0, description="Agent diary entries removed.")


class TurnsRemoved(BaseModel):
    """What removing archived turns of a session removed."""

    session: str
    events: int = Field(description="Archived turns removed (text blanked, recall index rows dropped).")
    entries: int = Field(description="Memories removed because every turn they were made from is gone.")


class ShardCompaction(BaseModel):
    shard: int
    generations: list[int] = Field(default_factory=list, description="Generations rewritten.")
    points: int = Field(default=0, description="Vector points copied into fresh stores (embedded backend).")
    vectors_rebuilt: bool = Field(default=False, description="False with the Qdrant server backend (the "
                                                             "server vacuums its own segments).")
    frozen_s: float = Field(default=0.0, description="How long the shard's writes waited.")
    skipped: str | None = Field(default=None, description="Why the stores were not rewritten (the archive "
                                                          "was compacted anyway).")


class CompactResponse(BaseModel):
    shards: list[ShardCompaction]


router = scoped_router(USER_PREFIX)
"""Under ``/v1/apps/{app}/users/{user}`` (the key must open ``app``)."""
admin_router = key_router()
"""Any valid key."""


@router.delete("", response_model=ForgetResponse, responses=errors(), summary="Erase a user",
               tags=["erasure"])
async def forget_user(request: Request, app: App, user: User) -> Response:
    """Erase the user: every entry and tombstone (vectors and keyword documents) in every generation,
    every archived turn with its recall index row, the session cursors, the extraction job records
    and the TTL access times. Run ``POST /v1/admin/compact`` (or let the maintenance loop do it) to
    remove the bytes from the data files. Idempotent: a second call removes nothing."""
    counts, seq = await shards(request).forget(make_key(app, user))
    return JSONResponse(to_json(counts), headers=seq_headers(seq))


@router.delete("/sessions/{session}", response_model=TurnsRemoved, responses=errors(),
               summary="Remove a session's archived turns", tags=["erasure"])
async def drop_session(request: Request, app: App, user: User, session: SessionPath) -> Response:
    """Remove every archived turn of the session for good (text blanked, recall index rows dropped; the
    ids stay so that a resend of the same events is still recognised) and every memory, in every
    generation, none of whose source turns is left. A pending extraction of the session never reads a
    removed turn. Idempotent: a second call removes nothing."""
    counts, seq = await shards(request).drop_turns(make_key(app, user), check_session(session))
    return JSONResponse(to_json(counts), headers=seq_headers(seq))


@router.delete("/sessions/{session}/events/{event_id}", response_model=TurnsRemoved, responses=errors(404),
               summary="Remove one archived turn", tags=["erasure"])
async def drop_turn(request: Request, app: App, user: User, session: SessionPath,
                    event_id: Annotated[str, Path(description="The turn's event id.")]) -> Response:
    """Remove one archived turn of the session as ``DELETE .../sessions/{session}`` removes all of them;
    404 when the session holds no such turn (or it was removed already)."""
    counts, seq = await shards(request).drop_turns(make_key(app, user), check_session(session), [event_id])
    if not counts["events"]:
        raise NotFoundError(f"session {session!r} holds no archived turn {event_id!r}", field="event_id")
    return JSONResponse(to_json(counts), headers=seq_headers(seq))


@admin_router.post("/v1/admin/compact", response_model=CompactResponse, responses=errors(),
                   summary="Compact the stores", tags=["erasure"])
async def compact(request: Request) -> Response:
    """Rewrite every shard's vector stores (embedded backend) and keyword indexes from their live
    entries, and merge, vacuum and checkpoint each event archive: afterwards no data file holds
    deleted text. Writes of a shard wait while it is rewritten; a read of that shard meanwhile may
    answer 503 (retry)."""
    _, settings = state(request)
    client = shards(request)
    done: list[dict[str, Any]] = list(await asyncio.gather(*(client.compact(k) for k in range(settings.shards))))
    return JSONResponse({"shards": to_json(done)})
