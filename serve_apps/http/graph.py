"""The knowledge-graph and diary routes of a user (:mod:`memcore.knowledge`; one module-level router).

::

    POST   /v1/apps/{app}/users/{user}/graph/facts               add a fact (201); ``supersede`` replaces the
                                                                 current object of its subject's predicate
    POST   /v1/apps/{app}/users/{user}/graph/facts/invalidate    end a fact (history kept)
    DELETE /v1/apps/{app}/users/{user}/graph/facts/{fact_id}     delete a fact for good, every version
    GET    /v1/apps/{app}/users/{user}/graph/facts?entity=...    facts of an entity (or all), bi-temporal
    GET    /v1/apps/{app}/users/{user}/graph/timeline?entity=    facts in chronological order
    GET    /v1/apps/{app}/users/{user}/graph/neighbourhood?entity=&hops=   entities within N hops
    PUT    /v1/apps/{app}/users/{user}/graph/entities            declare an entity (type, aliases)
    GET    /v1/apps/{app}/users/{user}/graph/entities/{name}     an entity (``entity`` null when unknown)
    POST   /v1/apps/{app}/users/{user}/diary                     write a diary entry (201)
    GET    /v1/apps/{app}/users/{user}/diary?agent=&limit=       an agent's entries, newest first
    GET    /v1/apps/{app}/graph/export                           every user's graph and diary (JSON Lines)
    POST   /v1/apps/{app}/graph/import                           restore such an export

Writes answer with ``X-Memcluster-Seq``. Bad input is 422 naming the field (``valid_from``, ``subject``, ...);
an unknown entity answers empty lists, not 404.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from memcore.graph import (
    DEFAULT_DIARY_RESULTS,
    DEFAULT_RESULTS,
    MAX_DIARY_RESULTS,
    MAX_HOPS,
    MAX_RESULTS,
    DiaryInput,
    Direction,
    EntityInput,
    FactInput,
    FactRef,
)
from memcore.graph_backup import encode_user, parse_lines
from memcore.validation import make_key
from serve_apps.deps import App, User, errors, seq_headers, shards, state
from serve_apps.http.access import USER_PREFIX, scoped_router

router = scoped_router(USER_PREFIX)
app_router = scoped_router()
_TAGS: list[str | Any] = ["graph"]
_TIME = "A date YYYY-MM-DD or an ISO-8601 date-time"


class FactRequest(FactInput):
    """A fact to add."""

    supersede: bool = Field(default=False, description="Make this the one current object of the subject's "
                                                       "predicate: the others end at valid_from (default now).")


def _given(query: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if v is not None}


@router.post("/graph/facts", status_code=201, response_model=dict[str, Any], responses=errors(),
             summary="Add a fact", tags=_TAGS)
async def add_fact(request: Request, app: App, user: User, fact: FactRequest) -> Response:
    """Record ``subject -> predicate -> object``. Idempotent: the same fact again is one fact (201 either way;
    ``created`` says whether it is new)."""
    body = fact.model_dump(mode="json", exclude={"supersede"}, exclude_none=True)
    result, seq = await shards(request).graph_add(make_key(app, user), body, fact.supersede)
    return JSONResponse(result, status_code=201, headers=seq_headers(seq))


@router.post("/graph/facts/invalidate", response_model=dict[str, Any], responses=errors(),
             summary="End a fact", tags=_TAGS)
async def invalidate_fact(request: Request, app: App, user: User, ref: FactRef) -> Response:
    """End the current fact ``subject -> predicate -> object`` at ``ended`` (default now); its history is kept.
    No such fact: nothing changes (``closed`` is empty)."""
    result, seq = await shards(request).graph_invalidate(make_key(app, user), ref.model_dump(mode="json",
                                                                                             exclude_none=True))
    return JSONResponse(result, headers=seq_headers(seq))


@router.delete("/graph/facts/{fact_id}", response_model=dict[str, Any], responses=errors(404),
               summary="Delete a fact", tags=_TAGS)
async def delete_fact(request: Request, app: App, user: User,
                      fact_id: Annotated[str, Path(description="The fact's ``fact_id``.")]) -> Response:
    """Remove the fact for good, every version of it (404 when unknown)."""
    result, seq = await shards(request).graph_delete(make_key(app, user), fact_id)
    return JSONResponse(result, headers=seq_headers(seq))


@router.get("/graph/facts", response_model=dict[str, Any], responses=errors(), summary="Query facts", tags=_TAGS)
async def query_facts(
    request: Request, app: App, user: User,
    entity: Annotated[str | None, Query(description="The entity (name or alias; any case). None: every fact.")]
    = None,
    direction: Annotated[Direction, Query(description="outgoing, incoming or both.")] = "both",
    predicate: Annotated[str | None, Query(description="Only this relationship type.")] = None,
    as_of: Annotated[str | None, Query(description=f"Valid time: only facts true then. {_TIME}.")] = None,
    known_at: Annotated[str | None, Query(description=f"Record time: what was believed then. {_TIME}.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = DEFAULT_RESULTS,
) -> Response:
    """Facts of an entity, by valid time; without ``as_of`` every believed version, each marked ``current``."""
    q = _given({"entity": entity, "direction": direction, "predicate": predicate, "as_of": as_of,
                "known_at": known_at, "limit": limit})
    return JSONResponse({"entity": entity, **await shards(request).graph_query(make_key(app, user), q)})


@router.get("/graph/timeline", response_model=dict[str, Any], responses=errors(), summary="Timeline", tags=_TAGS)
async def timeline(
    request: Request, app: App, user: User,
    entity: Annotated[str | None, Query(description="Optional entity.")] = None,
    known_at: Annotated[str | None, Query(description=f"Record time. {_TIME}.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = DEFAULT_RESULTS,
) -> Response:
    q = _given({"entity": entity, "known_at": known_at, "limit": limit})
    return JSONResponse({"entity": entity or "all", **await shards(request).graph_timeline(make_key(app, user), q)})


@router.get("/graph/neighbourhood", response_model=dict[str, Any], responses=errors(), summary="Neighbourhood",
            tags=_TAGS)
async def neighbourhood(
    request: Request, app: App, user: User,
    entity: Annotated[str, Query(description="The entity to start from.")],
    hops: Annotated[int, Query(ge=1, le=MAX_HOPS)] = 1,
    as_of: Annotated[str | None, Query(description=f"Valid time of the facts walked (default now). {_TIME}.")]
    = None,
    known_at: Annotated[str | None, Query(description=f"Record time. {_TIME}.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS)] = DEFAULT_RESULTS,
) -> Response:
    """The entities within ``hops`` of ``entity``, with their distance, and the facts between them."""
    q = _given({"entity": entity, "hops": hops, "as_of": as_of, "known_at": known_at, "limit": limit})
    return JSONResponse(await shards(request).graph_neighbourhood(make_key(app, user), q))


@router.put("/graph/entities", response_model=dict[str, Any], responses=errors(), summary="Declare an entity",
            tags=_TAGS)
async def put_entity(request: Request, app: App, user: User, entity: EntityInput) -> Response:
    """Create or change an entity: its type and aliases (the aliases given replace the stored ones; an alias of
    another entity is 422 ``aliases``)."""
    result, seq = await shards(request).graph_entity_put(make_key(app, user), entity.model_dump(mode="json"))
    return JSONResponse(result, headers=seq_headers(seq))


@router.get("/graph/entities/{name}", response_model=dict[str, Any], responses=errors(), summary="Get an entity",
            tags=_TAGS)
async def get_entity(request: Request, app: App, user: User,
                     name: Annotated[str, Path(description="A name or alias (any case).")]) -> Response:
    return JSONResponse({"entity": await shards(request).graph_entity(make_key(app, user), name)})


@router.post("/diary", status_code=201, response_model=dict[str, Any], responses=errors(),
             summary="Write a diary entry", tags=_TAGS)
async def write_diary(request: Request, app: App, user: User, entry: DiaryInput) -> Response:
    """An agent's diary entry (per app, user and agent); never returned by memory search."""
    result, seq = await shards(request).diary_write(make_key(app, user), entry.model_dump(mode="json"))
    return JSONResponse(result, status_code=201, headers=seq_headers(seq))


@router.get("/diary", response_model=dict[str, Any], responses=errors(), summary="Read the diary", tags=_TAGS)
async def read_diary(
    request: Request, app: App, user: User,
    agent: Annotated[str, Query(description="The agent's name.")] = "agent",
    limit: Annotated[int, Query(ge=1, le=MAX_DIARY_RESULTS)] = DEFAULT_DIARY_RESULTS,
    since: Annotated[str | None, Query(description=f"Entries written at or after. {_TIME}.")] = None,
    until: Annotated[str | None, Query(description=f"Entries written at or before. {_TIME}.")] = None,
    wing: Annotated[str | None, Query(description="Only entries of this wing.")] = None,
) -> Response:
    """The agent's entries, newest first, at most ``limit``; ``total`` counts every match."""
    q = _given({"agent": agent, "limit": limit, "since": since, "until": until, "wing": wing})
    return JSONResponse({"agent": agent, **await shards(request).diary_read(make_key(app, user), q)})


@app_router.get("/v1/apps/{app}/graph/export", response_class=StreamingResponse, responses=errors(),
                summary="Export an app's graphs and diaries", tags=_TAGS)
async def export_graph(request: Request, app: App) -> Response:
    """Every user's entities, fact versions (history included) and diary entries, as JSON Lines
    (:mod:`memcore.graph_backup`): the input of the import route."""
    make_key(app, "export")
    _, settings = state(request)
    client = shards(request)
    per_shard = await asyncio.gather(*(client.graph_export_users(k, app) for k in range(settings.shards)))
    users = sorted({u for shard_users in per_shard for u in shard_users})

    async def lines() -> Any:
        for user in users:
            key = make_key(app, user)
            yield encode_user(key, await client.graph_export(key)).encode("ascii")

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"Cache-Control": "no-store"})


@app_router.post("/v1/apps/{app}/graph/import", response_model=dict[str, Any], responses=errors(),
                 summary="Import an app's graphs and diaries", tags=_TAGS)
async def import_graph(request: Request, app: App) -> Response:
    """Restore a graph export of this app; every line is validated before anything is written (422 names
    ``lines.<n>.<field>``); an app whose memory is off refuses it (403 naming ``app``, before the body is read)."""
    make_key(app, "import")
    state(request)[1].policy(app).check_writes()
    by_user = await asyncio.to_thread(parse_lines, await request.body(), app)
    client = shards(request)
    records = 0
    for user, data in sorted(by_user.items()):
        written, _ = await client.graph_restore(make_key(app, user), data)
        records += written
    return JSONResponse({"app": app, "users": len(by_user), "records": records})
