"""The FastAPI application of the memory service, independent of Ray.

``create_app()`` builds the app from the module-level routers of this package (:mod:`.memories`,
:mod:`.tools`, :mod:`.ingest`, :mod:`.backup`, :mod:`.erasure`, :mod:`.health`) and the protocol
surfaces (:mod:`serve_apps.protocols`: MCP and the Mem0-compatible API); ``attach(app, backend, settings)`` gives it a
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

from fastapi import FastAPI

from serve_apps.deps import SEQ_HEADER, TIMING_HEADER
from serve_apps.http import backup, erasure, graph, health, ingest, memories, tools
from serve_apps.http.access import attach, body_limit
from serve_apps.http.errors import BodyLimitMiddleware, install_error_handlers
from serve_apps.http.paths import PathIdMiddleware
from serve_apps.observability import ObservabilityMiddleware

__all__ = ["SEQ_HEADER", "TIMING_HEADER", "attach", "create_app"]


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
    for router in (memories.router, graph.router, ingest.router, erasure.router, tools.router, backup.router,
                   graph.app_router, ingest.jobs_router, erasure.admin_router,
                   health.router):  # the order of the OpenAPI paths
        app.include_router(router)
    from serve_apps.protocols import install_protocols  # MCP at /mcp, the Mem0-compatible API at /mem0

    install_protocols(app)
    return app
