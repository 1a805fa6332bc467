"""A Mem0-compatible REST API under ``/mem0``: ``MemoryClient(api_key=<app key>, host=<base>/mem0)`` works
(``mem0ai`` 2.2.x, sync and async); each parameter it sends is applied or refused (422 naming it). So does
the 1.x client (``mem0ai`` 1.0.x, which trpc-agent-py 1.2.0's Mem0 tools and ``Mem0MemoryService`` are
written for: 2.x refuses their top-level ``user_id``) on its own routes, where search and list take entity
ids at the top level as well (ANDed with ``filters``, :func:`serve_apps.mem0.reads.top_level_scope`).

::

    GET    /mem0/v1/ping/                     the key's app          POST /mem0/v3/memories/add/      add
    POST   /mem0/v3/memories/search/          search                 POST /mem0/v3/memories/          list (paged)
    GET|PUT|DELETE /mem0/v1/memories/{id}/    get, update, delete    DELETE /mem0/v1/memories/        delete matching
    GET    /mem0/v1/memories/{id}/history/    id-rotation trail      GET  /mem0/v1/entities/   users, agents, runs, apps
    DELETE /mem0/v2/entities/{type}/{name}/   delete an entity's memories
    PUT|DELETE /mem0/v1/batch/                batch update / delete  POST /mem0/v1/feedback/       feedback (kept)
    POST   /mem0/v1/memories/                 add (mem0ai 1.x)       POST /mem0/v2/memories/search/  search (1.x)
    POST   /mem0/v2/memories/                 list (mem0ai 1.x)
    anything else                             501 naming the feature (webhooks, exports, profiles, projects, ...)

Auth: ``Authorization: Token <key>`` (what the client sends) or ``Bearer <key>``; the key selects the
app (``X-Memcluster-App`` picks one when a key opens several, or names the app when auth is off;
default ``mem0``). ``add`` with ``infer`` true (the default) goes through session ingest and the app's
extractor (verbatim when none is configured) and waits for the job; ``infer: false`` stores each
message as given; ``expiration_date`` is taken with ``infer: false`` and on update (refused, 422, with
``infer`` true); ``timestamp`` sets ``created_at`` (add) / ``updated_at`` (update). ``filters`` are Mem0's
v2 filters (:mod:`serve_apps.mem0.filters`); a search's ``score`` is the relevance clamped to 0..1 and
``threshold`` filters on it. This module holds the routes; add is :mod:`serve_apps.mem0.writes`, search and
the filtered reads :mod:`serve_apps.mem0.reads`, the data mapping :mod:`serve_apps.mem0.map`, the accepted
parameters :mod:`serve_apps.mem0.models`. Errors have the API's one shape ``{"error", "field", "message"}`` plus
Mem0's ``detail`` (:mod:`serve_apps.mem0.errors`), which the client shows as its exception's message.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from memcore.errors import NotFoundError, ValidationError
from memcore.fields import MAX_TEXT_BYTES, now_utc
from memcore.metadata import MetadataError, check_metadata
from memcore.model import Entry
from serve_apps.deps import shards
from serve_apps.deps import state as app_state
from serve_apps.http.access import ScopedRoute, check_path_encoding
from serve_apps.mem0 import filters as F
from serve_apps.mem0 import map as M
from serve_apps.mem0 import reads, writes
from serve_apps.mem0.models import (
    PROJECT_IDS,
    Mem0AddRequest,
    Mem0BatchRequest,
    Mem0FeedbackRequest,
    Mem0ListRequest,
    Mem0SearchRequest,
    Mem0UpdateRequest,
    check_options,
    check_project,
)
from serve_apps.protocol_auth import resolve_app

PREFIX = "/mem0"
TAG = "mem0"
DEFAULT_APP = "mem0"
MAX_LIST = 1000
UNSUPPORTED = (("webhooks", "webhooks"), ("exports", "memory exports"), ("profiles", "user profiles"),
               ("profile", "user profiles"), ("projects", "projects"), ("orgs", "organizations"),
               ("summary", "summaries"))


class Mem0Route(ScopedRoute):
    """The shared route guard (:class:`serve_apps.http.access.ScopedRoute`) with Mem0's check: the app
    comes from the key (``Authorization: Bearer`` or ``Token``, :func:`serve_apps.protocol_auth.resolve_app`),
    not from the path."""

    def check(self, request: Request) -> None:
        request.state.mem0_app = resolve_app(request, ("bearer", "token"), DEFAULT_APP)
        check_path_encoding(request)


# ----------------------------------------------------------------- routes
router = APIRouter(prefix=PREFIX, route_class=Mem0Route, tags=[TAG])


@router.get("/v1/ping/", summary="Check the key (Mem0 ping)")
async def ping(request: Request) -> dict[str, Any]:
    """Answers for a valid key; names the app it selects."""
    app = request.state.mem0_app
    return {"status": "ok", "message": "pong", "org_id": app, "project_id": app, "user_email": None}


@router.post("/v3/memories/add/", summary="Add memories (Mem0)")
async def add(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    """``infer`` true: extract through session ingest; false: store each message as given."""
    return await writes.add_memories(request, body)


@router.post("/v3/memories/search/", summary="Search memories (Mem0)")
async def search(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    """Hybrid search of each user named by ``filters`` (equality, AND/OR), best first."""
    return await reads.search_memories(request, body)


@router.post("/v3/memories/", summary="List memories (Mem0, paged)")
async def list_memories(request: Request, body: Mem0ListRequest, page: int = 1, page_size: int = 100) -> Any:
    """Memories matching ``filters``, newest first, ``page_size`` per page."""
    return await _page(request, body, body.filters, page, page_size)


@router.post("/v1/memories/", summary="Add memories (Mem0 1.x client)")
async def add_v1(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    """``POST /v3/memories/add/`` on the route of the mem0ai 1.x client."""
    return await writes.add_memories(request, body)


@router.post("/v2/memories/search/", summary="Search memories (Mem0 1.x client)")
async def search_v2(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    """``POST /v3/memories/search/``; entity ids may also be top-level fields (ANDed with ``filters``)."""
    body.filters = reads.top_level_scope(body)
    return await reads.search_memories(request, body)


@router.post("/v2/memories/", summary="List memories (Mem0 1.x client, paged)")
async def list_v2(request: Request, body: Mem0ListRequest, page: int = 1, page_size: int = 100) -> Any:
    """``POST /v3/memories/``; entity ids may also be top-level fields (ANDed with ``filters``)."""
    return await _page(request, body, reads.top_level_scope(body), page, page_size)


async def _page(request: Request, body: Mem0ListRequest, filters: Any, page: int, page_size: int
                ) -> dict[str, Any]:
    if page < 1:
        raise ValidationError("page must be at least 1", field="page")
    if not 1 <= page_size <= MAX_LIST:
        raise ValidationError(f"page_size must be 1..{MAX_LIST}", field="page_size")
    _only_query(request, ("page", "page_size"))
    check_options(body.model_extra, body.LIST_OPTIONS, request.state.mem0_app)
    tree = reads.filter_tree(filters, body.categories, body.start_date, body.end_date)
    entries = await reads.entries(request, request.state.mem0_app, tree)
    start = (page - 1) * page_size
    nxt = (str(request.url.include_query_params(page=page + 1, page_size=page_size))
           if start + page_size < len(entries) else None)
    prev = str(request.url.include_query_params(page=page - 1, page_size=page_size)) if page > 1 else None
    return {"count": len(entries), "next": nxt, "previous": prev,
            "results": [M.to_mem0(e) for e in entries[start : start + page_size]]}


@router.get("/v1/memories/{memory_id}/", summary="Get a memory (Mem0)")
async def get(request: Request, memory_id: str) -> dict[str, Any]:
    _only_query(request, ())
    user, eid = M.split_id(memory_id)
    return M.to_mem0(await shards(request).get(M.user_key(request.state.mem0_app, user), eid))


@router.put("/v1/memories/{memory_id}/", summary="Update a memory (Mem0)")
async def update(request: Request, memory_id: str, body: Mem0UpdateRequest) -> dict[str, Any]:
    """New text (the memcluster id rotates; the trail is kept for history), new metadata, a new
    ``expiration_date`` (null: never expires) and/or the ``timestamp`` of the change (its ``updated_at``)."""
    _only_query(request, ())
    return await _update(request, memory_id, body)


async def _update(request: Request, memory_id: str, body: Mem0UpdateRequest) -> dict[str, Any]:
    app = request.state.mem0_app
    check_options(body.model_extra, (), app)
    user, eid = M.split_id(memory_id)
    at = M.timestamp_of(body.timestamp, now_utc())
    entry = await shards(request).get(M.user_key(app, user), eid)
    memory: dict[str, Any] = {}  # an update changes only what it names (the rest of the entry is kept)
    user_meta = ({k: v for k, v in entry.metadata.items() if not k.startswith(M.PREFIX)}
                 if body.metadata is None else M.user_metadata(body.metadata))
    keep = {k: v for k, v in M.reserved(entry.metadata).items() if k != M.PREV}
    prev = entry.metadata.get(M.PREV)
    if body.text is not None and body.text.strip() != entry.text:
        memory["text"], prev = body.text, entry.id
        if (scope := M.scope_of(entry.metadata)) and entry.item_key is not None:  # the new text's scope key
            memory["key"] = M.entry_scope_key(entry, scope, body.text.strip())
    memory["metadata"] = {**user_meta, **keep, **({M.PREV: prev} if isinstance(prev, str) else {})}
    if M.EXPIRATION in body.model_fields_set:
        at = M.expiry_of(body.expiration_date, now_utc())
        memory["expires_at"] = at.isoformat() if at is not None else None
    updated, _ = await shards(request).update(M.user_key(app, user), eid, memory)
    if at is not None:
        await writes.stamp(request, app, user, [updated.id], at, created=False)
        updated = await shards(request).get(M.user_key(app, user), updated.id)
    return M.to_mem0(updated)


@router.delete("/v1/memories/{memory_id}/", summary="Delete a memory (Mem0)")
async def delete(request: Request, memory_id: str, delete_linked: bool = False) -> dict[str, Any]:
    """``delete_linked``: the versions this memory superseded are tombstones already (they never resurface)."""
    _only_query(request, ("delete_linked",))
    user, eid = M.split_id(memory_id)
    await shards(request).delete(M.user_key(request.state.mem0_app, user), eid)
    return {"message": "Memory deleted successfully!"}


def _only_query(request: Request, allowed: tuple[str, ...]) -> None:
    """Refuse a query parameter the route does not apply (422 naming it); ``org_id``/``project_id`` must name
    the key's app (:func:`serve_apps.mem0.models.check_project`)."""
    check_project(request.query_params, request.state.mem0_app)
    for name in request.query_params:
        if name not in allowed and name not in PROJECT_IDS:
            raise ValidationError(f"unknown query parameter {name!r}", field=name or "query")  # '' names nothing


def _query_filters(text: str | None) -> Any:
    """``filters`` of delete_all: ``mem0ai`` sends the dict as its Python text in the URL (``{'user_id': 'a'}``);
    JSON is read too. Only literals are read (:func:`ast.literal_eval`)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ValidationError("filters must be a JSON object of conditions", field="filters") from None


@router.delete("/v1/memories/", summary="Delete all memories of an entity (Mem0)")
async def delete_all(request: Request, user_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, app_id: str | None = None,
                     filters: str | None = None) -> dict[str, Any]:
    """The memories matching every id given (``"*"``: any) and ``filters``; at least one is required. Without a
    user_id the memories of every user of the app are matched."""
    _only_query(request, ("user_id", "agent_id", "run_id", "app_id", "filters"))
    app = request.state.mem0_app
    ids = {k: v for k, v in {"user_id": user_id, "agent_id": agent_id, "run_id": run_id, "app_id": app_id}.items()
           if v}
    parsed = _query_filters(filters)
    if not ids and not parsed:
        raise ValidationError("name a user_id, agent_id, run_id or app_id (or filters)", field="user_id")
    tree = F.conjoin(F.parse(ids, "") if ids else None, F.parse(parsed) if parsed else None)
    if set(ids) == {"user_id"} and not parsed and user_id != F.WILDCARD:
        await shards(request).clear(M.user_key(app, str(user_id)))
        return {"message": "Memories deleted successfully!"}
    for e in await reads.entries(request, app, tree):
        await shards(request).delete(M.user_key(app, M.mem0_user(e.user)), e.id)
    return {"message": "Memories deleted successfully!"}


@router.get("/v1/memories/{memory_id}/history/", summary="History of a memory (Mem0)")
async def history(request: Request, memory_id: str) -> list[dict[str, Any]]:
    """ADD, UPDATE (one per text change, following the id rotation) and DELETE events, oldest first."""
    _only_query(request, ())
    user, eid = M.split_id(memory_id)
    entries = await shards(request).export(M.user_key(request.state.mem0_app, user))
    return M.history(entries, eid)


@router.get("/v1/entities/", summary="Users, agents, runs and apps with memories (Mem0)")
async def entities(request: Request) -> dict[str, Any]:
    _only_query(request, ())
    app = request.state.mem0_app
    found: dict[tuple[str, str], list[Entry]] = {}
    for user in await reads.app_users(request, app):
        for e in await shards(request).read(M.user_key(app, user)):
            found.setdefault(("user", user), []).append(e)
            for kind, name in (("agent", e.metadata.get(M.AGENT)), ("run", e.metadata.get(M.RUN)),
                               ("app", e.metadata.get(M.APP))):
                if isinstance(name, str):
                    found.setdefault((kind, name), []).append(e)
    results = [{"id": name, "name": name, "type": kind, "total_memories": len(es), "owner": None,
                "organization": None, "metadata": None,
                "created_at": min(e.created_at for e in es).isoformat(),
                "updated_at": max(e.updated_at for e in es).isoformat()}
               for (kind, name), es in sorted(found.items())]
    return {"count": len(results), "next": None, "previous": None, "results": results}


@router.delete("/v2/entities/{entity_type}/{name:path}/", summary="Delete an entity's memories (Mem0)")
async def delete_entity(request: Request, entity_type: str, name: str) -> dict[str, Any]:
    """``name`` may hold ``/`` (mem0ai encodes it as ``%2F``): trpc-agent-py's ``app_name/user_id``."""
    _only_query(request, ())
    app = request.state.mem0_app
    if entity_type not in M.ENTITY_TYPES:
        raise ValidationError(f"entity type must be one of {sorted(M.ENTITY_TYPES)}", field="entity_type")
    M.entity_value(name, "name")
    if entity_type == "user":
        await shards(request).clear(M.user_key(app, name))
    else:
        for e in await reads.entity_memories(request, app, entity_type, name):
            await shards(request).delete(M.user_key(app, M.mem0_user(e.user)), e.id)
    return {"message": "Entity deleted successfully."}


@router.put("/v1/batch/", summary="Update several memories (Mem0)")
async def batch_update(request: Request, body: Mem0BatchRequest) -> dict[str, Any]:
    """Each memory's new ``text`` and/or ``metadata``; every id is checked before any is written (and the app's
    memory policy first: a write of an app whose memory is off is 403 whatever the ids)."""
    app_state(request)[1].policy(request.state.mem0_app).check_writes()
    items = await _batch(request, body)
    for item in items:
        await _update(request, item.memory_id, Mem0UpdateRequest(text=item.text, metadata=item.metadata))
    return {"message": f"Successfully updated {len(items)} memories"}


@router.delete("/v1/batch/", summary="Delete several memories (Mem0)")
async def batch_delete(request: Request, body: Mem0BatchRequest) -> dict[str, Any]:
    """Every id is checked before any is deleted."""
    for i, item in enumerate(body.memories):
        if item.text is not None or item.metadata is not None:
            raise ValidationError("a batch delete names memory ids only", field=f"memories.{i}")
    items = await _batch(request, body)
    for item in items:
        user, eid = M.split_id(item.memory_id)
        await shards(request).delete(M.user_key(request.state.mem0_app, user), eid)
    return {"message": f"Successfully deleted {len(items)} memories"}


async def _batch(request: Request, body: Mem0BatchRequest) -> list[Any]:
    """The batch's memories, each found (404 naming ``memories.<i>.memory_id``), named once, its new text and
    metadata checked: nothing is written when one is refused."""
    seen: set[str] = set()
    for i, item in enumerate(body.memories):
        if item.text is not None and (not item.text.strip() or len(item.text.encode("utf-8", "surrogatepass"))
                                      > MAX_TEXT_BYTES):
            raise ValidationError(f"text must be 1..{MAX_TEXT_BYTES} bytes", field=f"memories.{i}.text")
        if item.metadata is not None:
            try:
                check_metadata(M.user_metadata(item.metadata, f"memories.{i}.metadata"))
            except MetadataError as exc:
                raise ValidationError(str(exc), field=f"memories.{i}.{exc.field}") from None
        if item.memory_id in seen:
            raise ValidationError("a memory is named twice", field=f"memories.{i}.memory_id")
        seen.add(item.memory_id)
        try:
            user, eid = M.split_id(item.memory_id)
            await shards(request).get(M.user_key(request.state.mem0_app, user), eid)
        except NotFoundError:
            raise NotFoundError(f"memory {item.memory_id!r} not found", field=f"memories.{i}.memory_id") from None
    return list(body.memories)


@router.post("/v1/feedback/", summary="Feedback on a memory (Mem0)")
async def feedback(request: Request, body: Mem0FeedbackRequest) -> dict[str, Any]:
    """Kept on the memory (reserved metadata, not returned in ``metadata``); null clears it. memcluster's
    ranking does not use it."""
    app = request.state.mem0_app
    user, eid = M.split_id(body.memory_id)
    entry = await shards(request).get(M.user_key(app, user), eid)
    meta = {k: v for k, v in entry.metadata.items() if k not in (M.FEEDBACK, M.FEEDBACK_REASON)}
    given = {M.FEEDBACK: body.feedback, M.FEEDBACK_REASON: body.feedback_reason}
    meta.update({k: v for k, v in given.items() if v is not None})
    if meta != entry.metadata:
        await shards(request).update(M.user_key(app, user), eid, {"metadata": meta})
    return {"id": body.memory_id, "feedback": body.feedback, "feedback_reason": body.feedback_reason}


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False,
                  summary="Unsupported Mem0 features (501)")
async def unsupported(request: Request, rest: str) -> Response:
    """Webhooks, exports, profiles, projects and summaries are not implemented."""
    parts = rest.lower().split("/")
    feature = next((name for word, name in UNSUPPORTED if word in parts), f"/{rest}")
    return JSONResponse({"error": "NotImplemented", "field": "path",
                         "message": f"memcluster's Mem0 API does not support {feature}"}, status_code=501)
