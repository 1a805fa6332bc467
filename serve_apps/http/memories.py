"""The memory routes of a user: add, list, get, update, delete, clear, search and preload.

::

    POST   /v1/apps/{app}/users/{user}/memories               add (201)
    GET    /v1/apps/{app}/users/{user}/memories?limit=N       newest first
    GET    /v1/apps/{app}/users/{user}/memories/{id}          get
    PATCH  /v1/apps/{app}/users/{user}/memories/{id}          update (the id may rotate)
    DELETE /v1/apps/{app}/users/{user}/memories/{id}          delete (204)
    DELETE /v1/apps/{app}/users/{user}/memories               clear (204)
    POST   /v1/apps/{app}/users/{user}/memories/search        search
    POST   /v1/apps/{app}/users/{user}/preload                preload

Writes answer with ``X-Memcluster-Seq``; a search answers with ``Server-Timing`` (and hands the
metrics middleware its hit and token counts, :mod:`serve_apps.observability`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import JSONResponse

from memcore import tracing
from memcore.validation import make_key
from serve_apps.deps import TIMING_HEADER, App, Hard, MemoryId, PurgeSources, User, errors, seq_headers, shards, to_json
from serve_apps.http.access import ROUTE_T0, USER_PREFIX, scoped_router
from serve_apps.http.models import (
    DEFAULT_READ_LIMIT,
    MAX_READ_LIMIT,
    EntryList,
    EntryModel,
    MemoryRequest,
    MemoryUpdateRequest,
    MetadataFilterQuery,
    PreloadRequest,
    PreloadResponse,
    SearchRequest,
    SearchResponse,
    parse_metadata_filter,
)
from serve_apps.observability import SearchReport, report_search, server_timing

router = scoped_router(USER_PREFIX)

@contextmanager
def _in_flight(state: Any) -> Iterator[bool]:
    """Counts the searches this replica is serving; yields True when this one is alone. A lone search
    embeds its query on the event loop (a worker-thread hand-off costs about 1 ms on a busy 2-core host),
    concurrent ones in worker threads so that they overlap."""
    state.searches_in_flight = getattr(state, "searches_in_flight", 0) + 1
    try:
        yield state.searches_in_flight == 1
    finally:
        state.searches_in_flight -= 1


def _timing(request: Request, start: float, **parts: float) -> dict[str, float]:
    """The search's parts in ms: ``pre`` (auth check, body read and validation, up to the handler's
    ``start``), the handler's ``parts`` (seconds), then ``app`` (all of it, since the route wrapper started)."""
    t0 = request.scope.get(ROUTE_T0)
    if isinstance(t0, float):
        parts = {"pre": start - t0, **parts, "app": time.perf_counter() - t0}
    return {name: sec * 1e3 for name, sec in parts.items()}


@router.post("/memories", status_code=201, response_model=EntryModel, responses=errors(),
             summary="Add a memory", tags=["memories"])
async def add_memory(request: Request, app: App, user: User, memory: MemoryRequest) -> Response:
    """Store a memory. Idempotent: the same content gets the same id (topics replaced, a deleted one
    reactivated)."""
    key = make_key(app, user)
    entry, seq = await shards(request).add(key, memory.model_dump(mode="json"))
    return JSONResponse(to_json(entry), status_code=201, headers=seq_headers(seq))


@router.get("/memories", response_model=EntryList, responses=errors(), summary="List memories",
            tags=["memories"])
async def read_memories(
    request: Request, app: App, user: User,
    limit: Annotated[int, Query(ge=1, le=MAX_READ_LIMIT, description="At most this many.")] = DEFAULT_READ_LIMIT,
    metadata_filter: MetadataFilterQuery = None,
) -> Response:
    """The user's active memories, newest first (only those matching ``metadata_filter`` when given)."""
    flt = parse_metadata_filter(metadata_filter)
    entries = await shards(request).read(make_key(app, user), limit, flt)
    return JSONResponse({"entries": to_json(entries)})


@router.get("/memories/{memory_id}", response_model=EntryModel, responses=errors(404),
            summary="Get a memory", tags=["memories"])
async def get_memory(request: Request, app: App, user: User, memory_id: MemoryId) -> Response:
    """One active memory of the user; another user's id or a deleted one is 404."""
    entry = await shards(request).get(make_key(app, user), memory_id)
    return JSONResponse(to_json(entry))


@router.patch("/memories/{memory_id}", response_model=EntryModel, responses=errors(404, 409),
              summary="Update a memory", tags=["memories"])
async def update_memory(request: Request, app: App, user: User, memory_id: MemoryId,
                        memory: MemoryUpdateRequest) -> Response:
    """Change the fields given (text, topics, kind, event_time, participants, location, metadata, key,
    expiry: ``ttl_s`` restarts the lifetime, ``expires_at`` sets it, ``expires_at: null`` removes it); the
    rest is kept. A topics-, metadata- or expiry-only change keeps the id; a change of content returns
    the entry under its new id and retires the old one (409 if the new id is already active)."""
    key = make_key(app, user)
    entry, seq = await shards(request).update(key, memory_id,
                                              memory.model_dump(mode="json", include=memory.model_fields_set))
    return JSONResponse(to_json(entry), headers=seq_headers(seq))


@router.delete("/memories/{memory_id}", status_code=204, response_class=Response, responses=errors(404),
               summary="Delete a memory", tags=["memories"])
async def delete_memory(request: Request, app: App, user: User, memory_id: MemoryId,
                        hard: Hard = None, purge_sources: PurgeSources = False) -> Response:
    """Delete one memory (soft by default: it keeps its id and a re-add reactivates it). The archived
    turns it came from and no other live memory did are hidden from every read path (soft) or removed
    (hard); with ``purge_sources`` all of its turns."""
    _, seq = await shards(request).delete(make_key(app, user), memory_id, hard, purge_sources)
    return Response(status_code=204, headers=seq_headers(seq))


@router.delete("/memories", status_code=204, response_class=Response, responses=errors(),
               summary="Delete all memories of the user", tags=["memories"])
async def clear_memories(request: Request, app: App, user: User, hard: Hard = None,
                         purge_sources: PurgeSources = False) -> Response:
    """Delete every memory of the user; the archived turns they came from are hidden (soft) or removed
    (hard); with ``purge_sources`` every archived turn of the user."""
    _, seq = await shards(request).clear(make_key(app, user), hard, purge_sources)
    return Response(status_code=204, headers=seq_headers(seq))


@router.post("/memories/search", response_model=SearchResponse, responses=errors(),
             summary="Search memories", tags=["search"])
async def search_memories(request: Request, app: App, user: User, options: SearchRequest) -> Response:
    """Hybrid (dense + BM25, RRF) or dense search with every option; an empty query returns no hits."""
    t0 = time.perf_counter()
    key, opts = make_key(app, user), options.options()
    plain = opts.model_dump(exclude_defaults=True)
    facts: bytes = b""
    if opts.include_facts:
        found = await shards(request).search_facts(key, opts.query, opts.max_tokens)
        facts = b',"facts":' + json.dumps(found["facts"], ensure_ascii=False).encode("utf-8")
        if found["max_tokens"] is not None:
            plain["max_tokens"] = found["max_tokens"]
    embedder = getattr(request.app.state, "query_embedder", None)
    with _in_flight(request.app.state) as alone, tracing.search_span(app, opts.max_results, opts.hybrid):
        if embedder is not None and opts.query.strip():
            with tracing.embed_span(embedder):
                vector = (embedder.embed_queries([opts.query]) if alone
                          else await asyncio.to_thread(embedder.embed_queries, [opts.query]))[0]
            t1 = time.perf_counter()
            with tracing.span("memcluster.shard_call", memcluster__app=app):
                hits = await shards(request).search_json(key, plain, vector)
        else:
            t1 = t0
            with tracing.span("memcluster.shard_call", memcluster__app=app):
                hits = await shards(request).search_json(key, plain)
    t2 = time.perf_counter()
    response = Response(b'{"hits":' + hits + facts + b"}", media_type="application/json")
    parts = _timing(request, t0, embed=t1 - t0, shard=t2 - t1, encode=time.perf_counter() - t2)
    response.headers[TIMING_HEADER] = server_timing(parts)
    report_search(request, SearchReport(parts_ms=parts, hits_json=hits))
    return response


@router.post("/preload", response_model=PreloadResponse, responses=errors(), summary="Preload memories",
             tags=["preload"])
async def preload(request: Request, app: App, user: User, body: PreloadRequest) -> Response:
    """Choose the memories for the next model request (budget rules) and render them. A failing probe
    injects nothing (strategy `failed`) instead of failing the request."""
    result = await shards(request).preload(make_key(app, user), body.budget, body.message, body.mode,
                                          body.playbook, body.topics, body.topics_match, body.max_tokens,
                                          body.min_relevance, body.include_facts)
    return JSONResponse(to_json(result))


