"""The protocols memory users already run, on the ingress: MCP (Streamable HTTP, :mod:`serve_apps.mcp.http`)
at ``/mcp`` and the Mem0-compatible REST API (:mod:`serve_apps.mem0.api`) at ``/mem0``."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import Route

from serve_apps.mcp import http as mcp_http
from serve_apps.mem0 import api as mem0_api
from serve_apps.mem0.errors import Mem0ErrorDetail


def install_protocols(app: FastAPI) -> None:
    app.include_router(mem0_api.router)
    app.add_middleware(Mem0ErrorDetail, prefix=mem0_api.PREFIX)  # outermost: every /mem0 error carries detail
    app.router.routes.append(Route(mcp_http.PATH, endpoint=mcp_http.McpEndpoint(),
                                   methods=["GET", "POST", "DELETE"], include_in_schema=False))
    tags = list(app.openapi_tags or [])
    tags.append({"name": mem0_api.TAG, "description": "Mem0-compatible REST API (`mem0ai` MemoryClient with "
                 "host=<base>/mem0). MCP (Streamable HTTP) is served at /mcp, outside this document."})
    app.openapi_tags = tags
