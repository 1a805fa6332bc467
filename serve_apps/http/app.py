"""The FastAPI application of the memory service, independent of Ray.

``create_app()`` builds every route; ``attach(app, backend, settings)`` gives it a
:class:`actors.backend.ShardBackend` (Ray actors behind Ray Serve, or
:class:`actors.backend.LocalShardBackend` under uvicorn). Until then ``/readyz`` and every
``/v1`` route answer 503.

Routes (user-scoped ones under ``/v1/apps/{app}/users/{user}``)::

    POST   /memories               add (201)              GET  /memories?limit=N   newest first
    GET    /memories/{id}          get                    PATCH /memories/{id}     update (id may rotate)
    DELETE /memories/{id}?hard=&purge_sources=  delete (204)   DELETE /memories?hard=&purge_sources=  clear (204)
    POST   /memories/search        search                 POST /preload            preload
    POST   /tools/{name}           run a tool             GET  /v1/apps/{app}/tools?mode=   schemas
    POST   /sessions/{session}/events   ingest (202 job)  POST /sessions/recall   other sessions' turns
    GET    /v1/jobs/{job_id}       an ingest job (the key must open the job's app, else 404)
    GET    /v1/apps/{app}/export   JSONL backup of the app   POST /v1/apps/{app}/import   restore one
    DELETE /v1/apps/{app}/users/{user}   erase the user     POST /v1/admin/compact   compact the stores
    GET    /healthz  /readyz  /openapi.json  /docs        (open)

An id in the path that a URL would change (``.``, ``..``, ``/``, empty, or their percent-encoded
forms) is 422 naming the parameter (:mod:`serve_apps.http.paths`). Writes answer with
``X-Memcluster-Seq``, the write's place in the user's FIFO. With ``settings.api_keys`` set, every
``/v1/apps/{app}/...`` route needs ``Authorization: Bearer <key of that app>``: a missing or unknown
key is 401, a key of another app 403.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from memcore import tracing
from memcore.errors import NotFoundError, StoreError
from memcore.settings import ToolMode
from memcore.tools import openai_schema
from memcore.validation import make_key
from memcore.vocabulary import ALL_TOOLS
from serve_apps.deps import (
    SEQ_HEADER,
    TIMING_HEADER,
    App,
    Hard,
    MemoryId,
    PurgeSources,
    User,
    errors,
    seq_headers,
    shards,
    state,
    to_json,
)
from serve_apps.http.access import ROUTE_T0, KeyRoute, ScopedRoute, attach, body_limit
from serve_apps.http.backup import backup_routes
from serve_apps.http.erasure import erasure_routes
from serve_apps.http.errors import (
    BodyLimitMiddleware,
    install_error_handlers,
    response_for,
)
from serve_apps.http.ingest import ingest_routes, job_routes
from serve_apps.http.models import (
    DEFAULT_READ_LIMIT,
    MAX_READ_LIMIT,
    EntryList,
    EntryModel,
    ErrorBody,
    Health,
    MemoryRequest,
    MemoryUpdateRequest,
    MetadataFilterQuery,
    PreloadRequest,
    PreloadResponse,
    Ready,
    SearchRequest,
    SearchResponse,
    ToolCallRequest,
    ToolList,
    parse_metadata_filter,
)
from serve_apps.http.paths import PathIdMiddleware
from serve_apps.observability import ObservabilityMiddleware

__all__ = ["SEQ_HEADER", "TIMING_HEADER", "attach", "create_app"]

READY_TIMEOUT_S = 10.0
_USER_PREFIX = "/v1/apps/{app}/users/{user}"
_bearer = HTTPBearer(auto_error=False, description="The API key of the app in the path.")

# ---------------------------------------------------------------- helpers
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


def _server_timing(request: Request, start: float, **parts: float) -> str:
    """``Server-Timing`` value in ms: ``pre`` (auth check, body read and validation, up to the handler's
    ``start``), the handler's ``parts``, then ``app`` (all of it, since the route wrapper started)."""
    t0 = request.scope.get(ROUTE_T0)
    if isinstance(t0, float):
        parts = {"pre": start - t0, **parts, "app": time.perf_counter() - t0}
    return ", ".join(f"{name};dur={sec * 1e3:.2f}" for name, sec in parts.items())


# ---------------------------------------------------------------- routes
def _memory_routes(router: APIRouter) -> None:
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
        response = Response(b'{"hits":' + hits + b"}", media_type="application/json")
        response.headers[TIMING_HEADER] = _server_timing(request, t0, embed=t1 - t0, shard=t2 - t1,
                                                         encode=time.perf_counter() - t2)
        return response

    @router.post("/preload", response_model=PreloadResponse, responses=errors(), summary="Preload memories",
                 tags=["preload"])
    async def preload(request: Request, app: App, user: User, body: PreloadRequest) -> Response:
        """Choose the memories for the next model request (budget rules) and render them. A failing probe
        injects nothing (strategy `failed`) instead of failing the request."""
        result = await shards(request).preload(make_key(app, user), body.budget, body.message, body.mode,
                                              body.playbook, body.topics, body.topics_match, body.max_tokens)
        return JSONResponse(to_json(result))


def _tool_routes(router: APIRouter) -> None:
    @router.get("/v1/apps/{app}/tools", response_model=ToolList, responses=errors(), summary="List tools",
                tags=["tools"])
    async def list_tools(
        request: Request, app: App,
        mode: Annotated[ToolMode | None, Query(description="Optional: the app's mode is a deployment setting "
                                                           "(agentic: the agent manages memory; auto: an extractor "
                                                           "does, the agent only searches); another one is 403.")]
        = None,
    ) -> Response:
        """The OpenAI function schemas of exactly the tools the app exposes to agents, in its mode."""
        make_key(app, "tools")  # validates the app id (422 naming `app`)
        _, settings = state(request)
        policy = settings.policy(app)
        policy.check_mode(mode)
        return JSONResponse({"tools": [openai_schema(n) for n in policy.exposed_tools()],
                             "mode": policy.tool_mode.value, "memory": policy.memory})

    @router.post(_USER_PREFIX + "/tools/{name}", response_model=dict[str, Any], responses=errors(404),
                 summary="Run a tool", tags=["tools"])
    async def run_tool(
        request: Request, app: App, user: User,
        name: Annotated[str, Path(description="One of " + ", ".join(ALL_TOOLS) + ".")],
        call: ToolCallRequest,
    ) -> Response:
        """Execute a tool call for the user and return its JSON result. A tool the app does not expose to
        agents in its mode is 403, and so is a ``mode`` other than the app's."""
        key = make_key(app, user)
        if name not in ALL_TOOLS:
            raise NotFoundError(f"unknown tool {name!r}; known: {', '.join(ALL_TOOLS)}", field="name")
        result, seq = await shards(request).tool(key, name, dict(call.arguments), call.mode)
        return JSONResponse(to_json(result), headers=seq_headers(seq))


def _health_routes(app: FastAPI) -> None:
    @app.get("/healthz", response_model=Health, summary="Liveness", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up (no backend call)."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=Ready, responses={503: {"model": ErrorBody, "description": "Not ready"}},
             summary="Readiness", tags=["health"])
    async def readyz(request: Request) -> Response:
        """Every shard answers its status."""
        try:
            backend, _ = state(request)
            statuses = await asyncio.wait_for(backend.status(), READY_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            if isinstance(exc, TimeoutError):
                exc = StoreError(f"shards did not answer within {READY_TIMEOUT_S:g} s", field="shards")
            return response_for(exc)
        return JSONResponse({"status": "ready", "shards": to_json(list(statuses))})


def create_app() -> FastAPI:
    """The memory service's FastAPI app with every route; call :func:`attach` before serving requests."""
    app = FastAPI(
        title="memcluster memory service",
        version="0.1.0",
        summary="Long-term memory for LLM agents: store, search and preload memories; memory tools.",
        description=__doc__,
        openapi_tags=[
            {"name": "memories", "description": "Create, read, update and delete a user's memories."},
            {"name": "search", "description": "Hybrid dense + keyword search."},
            {"name": "preload", "description": "Memories to inject before a model call."},
            {"name": "tools", "description": "OpenAI function-calling memory tools."},
            {"name": "auto memory", "description": "Session ingest, extraction jobs and session recall."},
            {"name": "backups", "description": "Export and import one app's memories as JSON Lines."},
            {"name": "erasure", "description": "Erase a user; compact the stores so deleted text leaves the disk."},
            {"name": "health", "description": "Liveness and readiness probes."},
        ],
    )
    install_error_handlers(app)
    app.add_middleware(PathIdMiddleware, routes=lambda: app.routes)  # innermost: before routing
    app.add_middleware(BodyLimitMiddleware, limit=body_limit)
    app.add_middleware(ObservabilityMiddleware)  # outermost: metrics and the request log line
    user_router = APIRouter(prefix=_USER_PREFIX, route_class=ScopedRoute, dependencies=[Security(_bearer)])
    _memory_routes(user_router)
    tools_router = APIRouter(route_class=ScopedRoute, dependencies=[Security(_bearer)])
    _tool_routes(tools_router)
    ingest_routes(user_router)
    backup_routes(tools_router)
    jobs_router = APIRouter(route_class=KeyRoute, dependencies=[Security(_bearer)])
    job_routes(jobs_router)
    erasure_routes(user_router, jobs_router)
    app.include_router(user_router)
    app.include_router(tools_router)
    app.include_router(jobs_router)
    _health_routes(app)
    from serve_apps.protocols import install_protocols  # MCP at /mcp, the Mem0-compatible API at /mem0

    install_protocols(app)
    return app
