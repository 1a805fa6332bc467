"""A Mem0-compatible REST API under ``/mem0``: ``MemoryClient(api_key=<app key>, host=<base>/mem0)`` works
(``mem0ai`` 2.2.x, sync and async); each parameter it sends is applied or refused (422 naming it). So does
the 1.x client (``mem0ai`` 1.0.x, which trpc-agent-py 1.2.0's Mem0 tools and ``Mem0MemoryService`` are
written for: 2.x refuses their top-level ``user_id``) on its own routes, where search and list take entity
ids at the top level as well (ANDed with ``filters``, :func:`top_level_scope`).

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
``threshold`` filters on it. The data mapping is in :mod:`serve_apps.mem0.map`, the accepted parameters in
:mod:`serve_apps.mem0.models`. Errors have the API's one shape ``{"error", "field", "message"}`` plus
Mem0's ``detail`` (:mod:`serve_apps.mem0.errors`), which the client shows as its exception's message.
"""

from __future__ import annotations

import ast
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from memcore import tracing
from memcore.errors import NotFoundError, ValidationError
from memcore.fields import MAX_RESULTS_LIMIT, MAX_TEXT_BYTES, now_utc
from memcore.metadata import MAX_FILTER_KEYS, MetadataError, check_metadata
from memcore.model import Entry, UserKey
from memcore.relevance import MIN_RELEVANCE
from memcore.validation import make_key
from serve_apps.deps import shards
from serve_apps.deps import state as app_state
from serve_apps.http.access import ScopedRoute, check_path_encoding
from serve_apps.mem0 import filters as F
from serve_apps.mem0 import map as M
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
INFER_TIMEOUT_S = 60.0
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


def _key(app: str, user: str) -> UserKey:
    """The memcluster scope of a Mem0 user id (:func:`serve_apps.mem0.map.member`: 422 naming ``user_id``)."""
    return make_key(app, M.member(user))


# ----------------------------------------------------------------- handlers
async def _add(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    app = request.state.mem0_app
    check_options(body.model_extra, body.ADD_OPTIONS, app)
    created = M.timestamp_of(body.timestamp, now_utc())
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
        await _stamp(request, app, user, list(unique), created, created=True)
        return {"results": [{"id": M.mem0_id(user, e.id), "memory": e.text, "event": "ADD"} for e in unique.values()]}
    results = await _infer(request, app, user, entities.get("run_id"), messages, meta, created)
    for event, new in (("ADD", True), ("UPDATE", False)):
        written = [M.split_id(r["id"])[1] for r in results if r.get("id") and r["event"] == event]
        await _stamp(request, app, user, written, created, created=new)
    return {"results": results}


async def _stamp(request: Request, app: str, user: str, entry_ids: list[str], at: datetime | None, *,
                 created: bool) -> None:
    """Give the entries the caller's ``timestamp``: ``created_at`` and ``updated_at`` of a new memory
    (``created``), ``updated_at`` of an updated one; written back as they are (the shard's restore)."""
    if at is None or not entry_ids:
        return
    key = _key(app, user)
    entries = [await shards(request).get(key, eid) for eid in dict.fromkeys(entry_ids)]
    stamped = [e.model_copy(update={"created_at": at, "updated_at": at} if created or at < e.created_at
                            else {"updated_at": at}) for e in entries]
    await shards(request).restore(key, stamped)


async def _infer(request: Request, app: str, user: str, run: Any, messages: list[dict[str, str]],
                 meta: dict[str, Any], said_at: datetime | None = None) -> list[dict[str, Any]]:
    """Ingest the messages as a session (``run_id``, else ``mem0``; the turns said at ``said_at``, else
    now), wait for the extraction job, then give the entries it wrote the request's metadata and scope
    (:func:`_tag`)."""
    client = shards(request)
    key = _key(app, user)
    base, tag = now_utc(), uuid.uuid4().hex[:12]
    events = [{"id": f"mem0-{tag}-{i}", "role": m["role"], "content": m["content"],
               "timestamp": ((said_at or base) + timedelta(milliseconds=i)).isoformat()}
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


def _tree(filters: Any, categories: list[str] | None = None, since: Any = None, until: Any = None) -> F.Node:
    """The request's filter: ``filters`` AND the top-level ``categories`` / ``start_date`` / ``end_date``."""
    return F.conjoin(F.parse(filters), F.categories_in(categories), F.created_between(since, until))


async def _reach(request: Request, app: str, tree: F.Node) -> list[str]:
    """The users ``tree`` reaches: the ones it names, else (``user_id: "*"``, or no user named, as an agent's
    or a run's memories in Mem0) every user of the app, at most :data:`serve_apps.mem0.filters.MAX_USERS`.
    A filter without any condition is refused: it would read every user's memories by omission."""
    users = F.users_of(tree)
    if isinstance(users, set):
        return sorted(users)
    if tree.op == "and" and not tree.children:
        raise ValidationError("filters are required: name a user_id ('*' for every user of the app)",
                              field="filters.user_id")
    found = await _users(request, app)
    if len(found) > F.MAX_USERS:
        raise ValidationError(f"the filter reaches {len(found)} users, more than {F.MAX_USERS}: name the user_id",
                              field="filters.user_id")
    return found


def _exact(tree: F.Node) -> bool:
    """Whether the shard's own filters (the user, :func:`serve_apps.mem0.filters.pushdown`) decide ``tree``."""
    kids = tree.children if tree.op == "and" else (tree,)
    return len(kids) <= MAX_FILTER_KEYS and all(
        (k.field == "user_id" and k.op in ("eq", "in")) or (k.op == "eq" and k.field in M.ENTITY_KEYS)
        or k.op == "meta_eq" for k in kids)


async def _search(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    app = request.state.mem0_app
    check_options(body.model_extra, body.SEARCH_OPTIONS, app)
    tree = _tree(body.filters, body.categories)
    fields = _fields(body.fields)
    top_k = body.top_k
    if body.limit is not None:  # Mem0 open source's name of top_k
        if "top_k" in body.model_fields_set and body.top_k != body.limit:
            raise ValidationError("limit and top_k differ; give one", field="limit")
        top_k = body.limit
    best: dict[str, dict[str, Any]] = {}
    flt = F.pushdown(tree)
    wanted = top_k if _exact(tree) else MAX_RESULTS_LIMIT
    reached = await _reach(request, app, tree)
    with tracing.search_span(app, top_k, True):
        for user in reached:
            options: dict[str, Any] = {"query": body.query, "max_results": wanted, "metadata_filter": flt or None,
                                       "hybrid": body.keyword_search is not False}
            # threshold 0 keeps every hit (a negative cosine scores 0); without one a dense search keeps all too
            options["similarity_threshold"] = body.threshold if body.threshold else MIN_RELEVANCE
            with tracing.span("memcluster.shard_call", memcluster__app=app):
                hits = await shards(request).search(_key(app, user), options)
            # each user's top_k matches in the engine's (hybrid) order, whatever part of the filter the shard
            # applied, so a filter's shape never changes which memories a search finds
            for h in [h for h in hits if F.matches(tree, h.entry)][:top_k]:
                item = M.to_mem0(h.entry, M.score_of(h.relevance))
                if item["id"] not in best or best[item["id"]]["score"] < item["score"]:
                    best[item["id"]] = item
    ranked = sorted(best.values(), key=lambda r: (-r["score"], r["id"]))
    results = [_project(r, fields) for r in ranked[:top_k]]
    if not body.enable_graph:
        return {"results": results}
    relations: dict[tuple[str, str, str], dict[str, str]] = {}
    for user in reached:
        for f in (await shards(request).search_facts(_key(app, user), body.query))["facts"]:
            relations.setdefault((f["subject"], f["predicate"], f["object"]), {
                "source": f["subject"], "relationship": f["predicate"], "destination": f["object"]})
    return {"results": results, "relations": list(relations.values())}


RESULT_FIELDS = ("id", "memory", "user_id", "agent_id", "run_id", "app_id", "metadata", "categories", "immutable",
                 M.EXPIRATION, "created_at", "updated_at", "score")


def _fields(fields: list[str] | None) -> list[str] | None:
    for i, name in enumerate(fields or ()):
        if name not in RESULT_FIELDS:
            raise ValidationError(f"unknown result field {name!r}: use {', '.join(RESULT_FIELDS)}", field=f"fields.{i}")
    return fields


def _project(item: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    return item if fields is None else {k: v for k, v in item.items() if k == "id" or k in fields}


def top_level_scope(body: Mem0SearchRequest | Mem0ListRequest) -> Any:
    """The 1.x client's request scope: entity ids sent at the top level (``user_id=...``) ANDed with ``filters``."""
    extra = body.model_extra or {}
    ids = {k: extra.pop(k) for k in ("user_id", "agent_id", "run_id", "app_id") if extra.get(k) is not None}
    if not ids:
        return body.filters
    return {"AND": [ids, body.filters]} if body.filters else ids


async def _entries(request: Request, app: str, tree: F.Node) -> list[Entry]:
    found: dict[tuple[str, str], Entry] = {}
    flt = F.pushdown(tree)
    for user in await _reach(request, app, tree):
        for e in await shards(request).read(_key(app, user), None, flt or None):
            if F.matches(tree, e):
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
    return await _page(request, body, body.filters, page, page_size)


@router.post("/v1/memories/", summary="Add memories (Mem0 1.x client)")
async def add_v1(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    """``POST /v3/memories/add/`` on the route of the mem0ai 1.x client."""
    return await _add(request, body)


@router.post("/v2/memories/search/", summary="Search memories (Mem0 1.x client)")
async def search_v2(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    """``POST /v3/memories/search/``; entity ids may also be top-level fields (ANDed with ``filters``)."""
    body.filters = top_level_scope(body)
    return await _search(request, body)


@router.post("/v2/memories/", summary="List memories (Mem0 1.x client, paged)")
async def list_v2(request: Request, body: Mem0ListRequest, page: int = 1, page_size: int = 100) -> Any:
    """``POST /v3/memories/``; entity ids may also be top-level fields (ANDed with ``filters``)."""
    return await _page(request, body, top_level_scope(body), page, page_size)


async def _page(request: Request, body: Mem0ListRequest, filters: Any, page: int, page_size: int
                ) -> dict[str, Any]:
    if page < 1:
        raise ValidationError("page must be at least 1", field="page")
    if not 1 <= page_size <= MAX_LIST:
        raise ValidationError(f"page_size must be 1..{MAX_LIST}", field="page_size")
    _only_query(request, ("page", "page_size"))
    check_options(body.model_extra, body.LIST_OPTIONS, request.state.mem0_app)
    tree = _tree(filters, body.categories, body.start_date, body.end_date)
    entries = await _entries(request, request.state.mem0_app, tree)
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
    return M.to_mem0(await shards(request).get(_key(request.state.mem0_app, user), eid))


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
    if at is not None:
        await _stamp(request, app, user, [updated.id], at, created=False)
        updated = await shards(request).get(_key(app, user), updated.id)
    return M.to_mem0(updated)


@router.delete("/v1/memories/{memory_id}/", summary="Delete a memory (Mem0)")
async def delete(request: Request, memory_id: str, delete_linked: bool = False) -> dict[str, Any]:
    """``delete_linked``: the versions this memory superseded are tombstones already (they never resurface)."""
    _only_query(request, ("delete_linked",))
    user, eid = M.split_id(memory_id)
    await shards(request).delete(_key(request.state.mem0_app, user), eid)
    return {"message": "Memory deleted successfully!"}


def _only_query(request: Request, allowed: tuple[str, ...]) -> None:
    """Refuse a query parameter the route does not apply (422 naming it); ``org_id``/``project_id`` must name
    the key's app (:func:`serve_apps.mem0.models.check_project`)."""
    check_project(request.query_params, request.state.mem0_app)
    for name in request.query_params:
        if name not in allowed and name not in PROJECT_IDS:
            raise ValidationError(f"unknown query parameter {name!r}", field=name)


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
        await shards(request).clear(_key(app, str(user_id)))
        return {"message": "Memories deleted successfully!"}
    for e in await _entries(request, app, tree):
        await shards(request).delete(_key(app, M.mem0_user(e.user)), e.id)
    return {"message": "Memories deleted successfully!"}


@router.get("/v1/memories/{memory_id}/history/", summary="History of a memory (Mem0)")
async def history(request: Request, memory_id: str) -> list[dict[str, Any]]:
    """ADD, UPDATE (one per text change, following the id rotation) and DELETE events, oldest first."""
    _only_query(request, ())
    user, eid = M.split_id(memory_id)
    entries = await shards(request).export(_key(request.state.mem0_app, user))
    return M.history(entries, eid)


@router.get("/v1/entities/", summary="Users, agents, runs and apps with memories (Mem0)")
async def entities(request: Request) -> dict[str, Any]:
    _only_query(request, ())
    app = request.state.mem0_app
    found: dict[tuple[str, str], list[Entry]] = {}
    for user in await _users(request, app):
        for e in await shards(request).read(_key(app, user)):
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
        await shards(request).clear(_key(app, name))
    else:
        for e in await _entity_memories(request, app, entity_type, name):
            await shards(request).delete(_key(app, M.mem0_user(e.user)), e.id)
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
        await shards(request).delete(_key(request.state.mem0_app, user), eid)
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
            await shards(request).get(_key(request.state.mem0_app, user), eid)
        except NotFoundError:
            raise NotFoundError(f"memory {item.memory_id!r} not found", field=f"memories.{i}.memory_id") from None
    return list(body.memories)


@router.post("/v1/feedback/", summary="Feedback on a memory (Mem0)")
async def feedback(request: Request, body: Mem0FeedbackRequest) -> dict[str, Any]:
    """Kept on the memory (reserved metadata, not returned in ``metadata``); null clears it. memcluster's
    ranking does not use it."""
    app = request.state.mem0_app
    user, eid = M.split_id(body.memory_id)
    entry = await shards(request).get(_key(app, user), eid)
    meta = {k: v for k, v in entry.metadata.items() if k not in (M.FEEDBACK, M.FEEDBACK_REASON)}
    given = {M.FEEDBACK: body.feedback, M.FEEDBACK_REASON: body.feedback_reason}
    meta.update({k: v for k, v in given.items() if v is not None})
    if meta != entry.metadata:
        await shards(request).update(_key(app, user), eid, {"metadata": meta})
    return {"id": body.memory_id, "feedback": body.feedback, "feedback_reason": body.feedback_reason}


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False,
                  summary="Unsupported Mem0 features (501)")
async def unsupported(request: Request, rest: str) -> Response:
    """Webhooks, exports, profiles, projects and summaries are not implemented."""
    parts = rest.lower().split("/")
    feature = next((name for word, name in UNSUPPORTED if word in parts), f"/{rest}")
    return JSONResponse({"error": "NotImplemented", "field": "path",
                         "message": f"memcluster's Mem0 API does not support {feature}"}, status_code=501)
