"""Auto-memory routes: session ingest, job status and session recall (module-level routers).

::

    POST /v1/apps/{app}/users/{user}/sessions/{session}/events[?wait=S]   {"events": [...]}
         202 {"job_id", "status": "queued", ...}      the job runs in the user's shard
         200 {"status": "done" | "partial" | "failed", ...}   ``wait``: the job finished within S seconds
         200 {"status": "done" | "partial" | "failed", ...}   the shard's queue was full: the request waited
         200 {"status": "skipped", "reason": ...}     nothing new, a checker declined, external context
    GET  /v1/jobs/{job_id}                           the job (404 for a key of another app)
    POST /v1/apps/{app}/users/{user}/sessions/recall {"query", "session", "max_results"}
         archived raw turns of the user's other sessions, best BM25 match first

The job id carries its shard number, so the ingress asks that one shard. A job keeps running
when the client disconnects: it belongs to the shard from the moment it is recorded.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request, Response
from fastapi.responses import JSONResponse

from memcore.errors import NotFoundError
from memcore.records import UNFINISHED
from memcore.validation import make_key
from serve_apps.deps import App, User, errors, shards, to_json
from serve_apps.http.access import USER_PREFIX, key_router, scoped_router
from serve_apps.http.models import IngestRequest, JobModel, RecallRequest, RecallResponse

Session = Annotated[str, Path(description="Session id (the identifier rule: 1..128 characters, no control "
                                          "characters, nothing a URL would change such as '.', '..' or '/').")]
JobId = Annotated[str, Path(description="A job id as returned by the ingest route.")]
MAX_WAIT_S = 60.0
Wait = Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the job to finish before "
                                                               "answering (0: answer at once with the queued job).")]
_TAGS = ["auto memory"]

router = scoped_router(USER_PREFIX)
"""Routes under ``/v1/apps/{app}/users/{user}`` (the key must open ``app``)."""
jobs_router = key_router()
"""Routes that carry no app in the path (any valid key, checked per job)."""


@router.post("/sessions/recall", response_model=RecallResponse, responses=errors(),
             summary="Search other sessions' turns", tags=list(_TAGS))
async def recall_sessions(request: Request, app: App, user: User, body: RecallRequest) -> Response:
    """BM25 over the archived raw user/assistant turns of the user's sessions, the current one
    (``session``) excluded. Other users and apps are never searched."""
    hits = await shards(request).recall(make_key(app, user), body.query, body.session, body.max_results)
    return JSONResponse({"hits": to_json(hits)})


@router.post("/sessions/{session}/events", status_code=202, response_model=JobModel,
             responses={**errors(), 200: {"model": JobModel,
                                           "description": "Finished at once: skipped, or run synchronously"}},
             summary="Ingest session events", tags=list(_TAGS))
async def ingest_events(request: Request, app: App, user: User, session: Session,
                        body: IngestRequest, wait: Wait = 0.0) -> Response:
    """Archive the session's messages and queue an extraction of what the archive holds and has not
    extracted yet (see the request body for how messages without ids are told apart). 202 with a
    queued job; 200 when the job was skipped, (queue full) already ran, or finished within ``wait``."""
    key = make_key(app, user)
    events = [e.model_dump(mode="json", exclude_none=True) for e in body.events]
    client = shards(request)
    job = await client.ingest(key, session, events)
    if wait > 0:
        job = await client.wait_job(job, wait)
    status = 202 if job.status in UNFINISHED else 200
    location = f"{request.scope.get('root_path', '')}/v1/jobs/{job.job_id}"
    return JSONResponse(to_json(job), status_code=status, headers={"Location": location})


@jobs_router.get("/v1/jobs/{job_id}", response_model=JobModel, responses=errors(404), summary="An ingest job",
                 tags=list(_TAGS))
async def get_job(request: Request, job_id: JobId) -> Response:
    """Status, per-operation results, errors and the session cursor of an ingest job. A job of an
    app the key does not open is reported as unknown (404)."""
    granted = getattr(request.state, "granted_apps", None)
    job = await shards(request).find_job(job_id)  # its id's shard first (the others: after `memctl reshard`)
    if granted is not None and job.app not in granted:
        raise NotFoundError(f"job {job_id!r} not found", field="job_id")
    return JSONResponse(to_json(job))
