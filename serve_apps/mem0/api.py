"""A Mem0-compatible REST API under ``/mem0``: ``MemoryClient(api_key=<app key>, host=<base>/mem0)`` works
unchanged (``mem0ai`` 2.2.x, sync and async).

::

    GET    /mem0/v1/ping/                     the key's app          POST /mem0/v3/memories/add/      add
    POST   /mem0/v3/memories/search/          search                 POST /mem0/v3/memories/          list (paged)
    GET|PUT|DELETE /mem0/v1/memories/{id}/    get, update, delete    DELETE /mem0/v1/memories/        delete all
    GET    /mem0/v1/memories/{id}/history/    id-rotation trail      GET  /mem0/v1/entities/      users, agents, runs
    DELETE /mem0/v2/entities/{type}/{name}/   delete an entity's memories
    anything else                             501 naming the feature (webhooks, exports, profiles, projects, ...)

Auth: ``Authorization: Token <key>`` (what the client sends) or ``Bearer <key>``; the key selects the
app (``X-Memcluster-App`` picks one when a key opens several, or names the app when auth is off;
default ``mem0``). ``add`` with ``infer`` true (the default) goes through session ingest and the app's
extractor (verbatim when none is configured) and waits for the job; ``infer: false`` stores each
message as given; ``expiration_date`` is taken with ``infer: false`` and on update (refused, 422, with
``infer`` true). The data mapping is in :mod:`serve_apps.mem0.map`. Errors have the API's one shape
``{"error", "field", "message"}`` (the client shows that JSON as its exception's message).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from memcore import tracing
from memcore.errors import NotFoundError, ValidationError
from memcore.fields import now_utc
from memcore.model import Entry, UserKey
from memcore.validation import make_key
from serve_apps.deps import shards
from serve_apps.deps import state as app_state
from serve_apps.http.access import ScopedRoute, check_path_encoding
from serve_apps.mem0 import map as M
from serve_apps.mem0.models import Mem0AddRequest, Mem0ListRequest, Mem0SearchRequest, Mem0UpdateRequest
from serve_apps.protocol_auth import resolve_app

PREFIX = "/mem0"
TAG = "mem0"
DEFAULT_APP = "mem0"
INFER_TIMEOUT_S = 60.0
MAX_LIST = 1000
UNSUPPORTED = (("webhooks", "webhooks"), ("exports", "memory exports"), ("profiles", "user profiles"),
               ("profile", "user profiles"), ("projects", "projects"), ("orgs", "organizations"),
               ("summary", "summaries"), ("batch", "batch update/delete"), ("feedback", "feedback"))


class Mem0Route(ScopedRoute):
    """The shared route guard (:class:`serve_apps.http.access.ScopedRoute`) with Mem0's check: the app
    comes from the key (``Authorization: Bearer`` or ``Token``, :func:`serve_apps.protocol_auth.resolve_app`),
    not from the path."""

    def check(self, request: Request) -> None:
        request.state.mem0_app = resolve_app(request, ("bearer", "token"), DEFAULT_APP)
        check_path_encoding(request)


def _key(app: str, user: str) -> UserKey:
    """The memcluster scope of a Mem0 user id (:func:`serve_apps.mem0.map.member`: 422 naming ``user_id``)."""
    return make_key(app, M.member(user))


# ----------------------------------------------------------------- handlers
async def _add(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    app = request.state.mem0_app
    entities = body.entities()
    user = entities.get("user_id")
    if not isinstance(user, str):
        raise ValidationError("user_id is required (memcluster scopes every memory by user)", field="user_id")
    _key(app, user)
    meta = M.entry_metadata(M.user_metadata(body.metadata), entities)
    scope = M.scope_of(meta)
    messages = body.message_list()
    expires_at = M.expiry_of(body.expiration_date, now_utc())
    if expires_at is not None and body.infer:
        raise ValidationError(f"{M.EXPIRATION} is supported with infer=false only (extraction does not carry "
                              "an expiry)", field=M.EXPIRATION)
    if not body.infer:
        expiry = {"expires_at": expires_at.isoformat()} if expires_at is not None else {}
        memories = [{"text": m["content"], "source": "assistant" if m["role"] == "assistant" else "user",
                     "metadata": meta, "key": M.scope_key(scope, m["content"]), **expiry}
                    for m in messages if m["role"] != "system" and m["content"].strip()]
        if not memories:
            return {"results": []}
        entries, _ = await shards(request).add_many(_key(app, user), memories)
        unique = {e.id: e for e in entries}
        return {"results": [{"id": M.mem0_id(user, e.id), "memory": e.text, "event": "ADD"} for e in unique.values()]}
    return {"results": await _infer(request, app, user, entities.get("run_id"), messages, meta)}


async def _infer(request: Request, app: str, user: str, run: Any, messages: list[dict[str, str]],
                 meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Ingest the messages as a session (``run_id``, else ``mem0``), wait for the extraction job, then
    give the entries it wrote the request's metadata and scope (:func:`_tag`)."""
    client = shards(request)
    key = _key(app, user)
    base, tag = now_utc(), uuid.uuid4().hex[:12]
    events = [{"id": f"mem0-{tag}-{i}", "role": m["role"], "content": m["content"],
               "timestamp": (base + timedelta(milliseconds=i)).isoformat()}
              for i, m in enumerate(messages) if m["role"] != "system"]
    session = M.member(run, "run_id") if isinstance(run, str) else M.DEFAULT_SESSION
    job = await client.wait_job(await client.ingest(key, session, events), INFER_TIMEOUT_S)
    if not job.finished:
        return [{"id": None, "memory": None, "event": "PENDING", "job_id": job.job_id}]
    out: list[dict[str, Any]] = []
    for op in job.results:
        action = op.action or op.type
        eid = op.effective_id or op.memory_id
        if op.status == "skipped" and op.type == "add" and eid:
            # a duplicate of an existing memory: a new memory when that one belongs to another scope
            tagged = await _tag(request, app, user, eid, meta, "ADD", base, other_scope_only=True)
            out += [tagged] if tagged else []
        elif op.status != "applied":
            continue
        elif action == "delete" and op.memory_id:
            out.append({"id": M.mem0_id(user, op.memory_id), "memory": None, "event": "DELETE"})
        elif action in ("add", "update") and eid:
            tagged = await _tag(request, app, user, eid, meta, "ADD" if action == "add" else "UPDATE",
                                base)
            out += [tagged] if tagged else []
    return out


async def _tag(request: Request, app: str, user: str, entry_id: str, meta: dict[str, Any], event: str,
               since: datetime, *, other_scope_only: bool = False) -> dict[str, Any] | None:
    """Give an extracted entry the request's metadata, in the request's scope. An entry of that scope gets
    the metadata (same text: the id does not change); an entry of another scope (or none) is never moved:
    the memory is written under the request's scope key instead (:func:`serve_apps.mem0.map.scope_key`; no
    key without a scope), and the extracted entry is removed only when this job created it (``created_at``
    from ``since`` on).
    ``other_scope_only`` (a skipped duplicate): None when the entry already is in the request's scope."""
    try:
        entry = await shards(request).get(_key(app, user), entry_id)
    except NotFoundError:
        return {"id": M.mem0_id(user, entry_id), "memory": None, "event": event}
    scope = M.scope_of(meta)
    if M.scope_of(entry.metadata) != scope:
        if not scope and entry.item_key is None:  # an entry tagged before scopes had keys: its id is the copy's
            return None if other_scope_only else {"id": M.mem0_id(user, entry.id), "memory": entry.text,
                                                  "event": event}
        own = {k: v for k, v in entry.metadata.items() if not k.startswith(M.PREFIX)}
        copy = {"text": entry.text, "topics": entry.topics, "kind": entry.kind.value,
                "event_time": entry.event_time.isoformat() if entry.event_time else None,
                "participants": entry.participants, "location": entry.location, "source": entry.source.value,
                "provenance": entry.provenance, "metadata": {**own, **meta}, "key": M.entry_scope_key(entry, scope)}
        scoped, _ = await shards(request).add(_key(app, user), copy)
        if entry.item_key is None and entry.created_at >= since:
            await shards(request).delete(_key(app, user), entry.id, True)
        return {"id": M.mem0_id(user, scoped.id), "memory": scoped.text, "event": event}
    if other_scope_only:
        return None
    if meta and entry.metadata != {**entry.metadata, **meta}:
        entry, _ = await shards(request).update(_key(app, user), entry_id,
                                                {"metadata": {**entry.metadata, **meta}})
    return {"id": M.mem0_id(user, entry.id), "memory": entry.text, "event": event}


async def _search(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    app = request.state.mem0_app
    best: dict[str, dict[str, Any]] = {}
    with tracing.search_span(app, body.top_k, True):
        for user, flt in M.scoped(M.conjunctions(body.filters)):
            options: dict[str, Any] = {"query": body.query, "max_results": body.top_k,
                                       "metadata_filter": flt or None}
            if body.threshold is not None:
                options["similarity_threshold"] = body.threshold
            with tracing.span("memcluster.shard_call", memcluster__app=app):
                hits = await shards(request).search(_key(app, user), options)
            for h in hits:
                item = M.to_mem0(h.entry, h.score)
                if item["id"] not in best or best[item["id"]]["score"] < h.score:
                    best[item["id"]] = item
    ranked = sorted(best.values(), key=lambda r: (-r["score"], r["id"]))
    return {"results": ranked[: body.top_k]}


async def _entries(request: Request, app: str, filters: Any) -> list[Entry]:
    found: dict[tuple[str, str], Entry] = {}
    for user, flt in M.scoped(M.conjunctions(filters)):
        for e in await shards(request).read(_key(app, user), None, flt or None):
            found[(e.user, e.id)] = e
    return sorted(found.values(), key=lambda e: (e.updated_at, e.id), reverse=True)


async def _users(request: Request, app: str) -> list[str]:
    """The Mem0 user ids of the app's users."""
    _, settings = app_state(request)
    users: set[str] = set()
    for shard in range(settings.shards):
        users.update(await shards(request).export_users(shard, app))
    return sorted(M.mem0_user(u) for u in users)


async def _entity_memories(request: Request, app: str, kind: str, name: str) -> list[Entry]:
    if kind == "user":
        return await shards(request).read(_key(app, name))
    key = M.ENTITY_KEYS[M.ENTITY_TYPES[kind]]
    out: list[Entry] = []
    for user in await _users(request, app):
        out += await shards(request).read(_key(app, user), None, {key: name})
    return out


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
    return await _add(request, body)


@router.post("/v3/memories/search/", summary="Search memories (Mem0)")
async def search(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    """Hybrid search of each user named by ``filters`` (equality, AND/OR), best first."""
    return await _search(request, body)


@router.post("/v3/memories/", summary="List memories (Mem0, paged)")
async def list_memories(request: Request, body: Mem0ListRequest, page: int = 1, page_size: int = 100) -> Any:
    """Memories matching ``filters``, newest first, ``page_size`` per page."""
    if page < 1:
        raise ValidationError("page must be at least 1", field="page")
    if not 1 <= page_size <= MAX_LIST:
        raise ValidationError(f"page_size must be 1..{MAX_LIST}", field="page_size")
    entries = await _entries(request, request.state.mem0_app, body.filters)
    start = (page - 1) * page_size
    nxt = (str(request.url.include_query_params(page=page + 1, page_size=page_size))
           if start + page_size < len(entries) else None)
    prev = str(request.url.include_query_params(page=page - 1, page_size=page_size)) if page > 1 else None
    return {"count": len(entries), "next": nxt, "previous": prev,
            "results": [M.to_mem0(e) for e in entries[start : start + page_size]]}


@router.get("/v1/memories/{memory_id}/", summary="Get a memory (Mem0)")
async def get(request: Request, memory_id: str) -> dict[str, Any]:
    user, eid = M.split_id(memory_id)
    return M.to_mem0(await shards(request).get(_key(request.state.mem0_app, user), eid))


@router.put("/v1/memories/{memory_id}/", summary="Update a memory (Mem0)")
async def update(request: Request, memory_id: str, body: Mem0UpdateRequest) -> dict[str, Any]:
    """New text (the memcluster id rotates; the trail is kept for history), new metadata and/or a new
    ``expiration_date`` (null: never expires)."""
    app = request.state.mem0_app
    user, eid = M.split_id(memory_id)
    entry = await shards(request).get(_key(app, user), eid)
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
    updated, _ = await shards(request).update(_key(app, user), eid, memory)
    return M.to_mem0(updated)


@router.delete("/v1/memories/{memory_id}/", summary="Delete a memory (Mem0)")
async def delete(request: Request, memory_id: str) -> dict[str, Any]:
    user, eid = M.split_id(memory_id)
    await shards(request).delete(_key(request.state.mem0_app, user), eid)
    return {"message": "Memory deleted successfully!"}


@router.delete("/v1/memories/", summary="Delete all memories of an entity (Mem0)")
async def delete_all(request: Request, user_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, app_id: str | None = None) -> dict[str, Any]:
    """The memories matching every id given; at least one is required."""
    app = request.state.mem0_app
    given = {k: v for k, v in {"agent_id": agent_id, "run_id": run_id, "app_id": app_id}.items() if v}
    if user_id and not given:
        await shards(request).clear(_key(app, user_id))
        return {"message": "Memories deleted successfully!"}
    if not user_id and not given:
        raise ValidationError("name a user_id, agent_id, run_id or app_id", field="user_id")
    users = [user_id] if user_id else await _users(request, app)
    flt = {M.ENTITY_KEYS[k]: v for k, v in given.items()}
    for user in users:
        for e in await shards(request).read(_key(app, user), None, flt):
            await shards(request).delete(_key(app, user), e.id)
    return {"message": "Memories deleted successfully!"}


@router.get("/v1/memories/{memory_id}/history/", summary="History of a memory (Mem0)")
async def history(request: Request, memory_id: str) -> list[dict[str, Any]]:
    """ADD, UPDATE (one per text change, following the id rotation) and DELETE events, oldest first."""
    user, eid = M.split_id(memory_id)
    entries = await shards(request).export(_key(request.state.mem0_app, user))
    return M.history(entries, eid)


@router.get("/v1/entities/", summary="Users, agents and runs with memories (Mem0)")
async def entities(request: Request) -> dict[str, Any]:
    app = request.state.mem0_app
    found: dict[tuple[str, str], list[Entry]] = {}
    for user in await _users(request, app):
        for e in await shards(request).read(_key(app, user)):
            found.setdefault(("user", user), []).append(e)
            for kind, name in (("agent", e.metadata.get(M.AGENT)), ("run", e.metadata.get(M.RUN))):
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
    app = request.state.mem0_app
    if entity_type not in M.ENTITY_TYPES:
        raise ValidationError(f"entity type must be one of {sorted(M.ENTITY_TYPES)}", field="entity_type")
    M.entity_value(name, "name")
    if entity_type == "user":
        await shards(request).clear(_key(app, name))
    else:
        for e in await _entity_memories(request, app, entity_type, name):
            await shards(request).delete(_key(app, M.mem0_user(e.user)), e.id)
    return {"message": "Entity deleted successfully."}


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False,
                  summary="Unsupported Mem0 features (501)")
async def unsupported(request: Request, rest: str) -> Response:
    """Webhooks, exports, profiles, projects, summaries, batch and feedback are not implemented."""
    parts = rest.lower().split("/")
    feature = next((name for word, name in UNSUPPORTED if word in parts), f"/{rest}")
    return JSONResponse({"error": "NotImplemented", "field": "path",
                         "message": f"memcluster's Mem0 API does not support {feature}"}, status_code=501)
