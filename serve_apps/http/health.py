"""The open health routes: ``GET /healthz`` (the process is up) and ``GET /readyz`` (every shard answers)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from memcore.errors import StoreError
from serve_apps.deps import state, to_json
from serve_apps.http.errors import response_for
from serve_apps.http.models import ErrorBody, Health, Ready

READY_TIMEOUT_S = 10.0
router = APIRouter()


@router.get("/healthz", response_model=Health, summary="Liveness", tags=["health"])
async def healthz() -> dict[str, str]:
    """The process is up (no backend call)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Ready, responses={503: {"model": ErrorBody, "description": "Not ready"}},
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


