"""Mem0's reads over memcluster: the request's filter tree, the users it reaches, search across them, the
entries a filter selects, and the result fields a caller may project. The routes are
:mod:`serve_apps.mem0.api`'s."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from memcore import tracing
from memcore.errors import ValidationError
from memcore.fields import MAX_RESULTS_LIMIT
from memcore.metadata import MAX_FILTER_KEYS
from memcore.model import Entry
from memcore.relevance import MIN_RELEVANCE
from serve_apps.deps import shards
from serve_apps.deps import state as app_state
from serve_apps.mem0 import filters as F
from serve_apps.mem0 import map as M
from serve_apps.mem0.models import Mem0ListRequest, Mem0SearchRequest, check_options


def filter_tree(filters: Any, categories: list[str] | None = None, since: Any = None, until: Any = None) -> F.Node:
    """The request's filter: ``filters`` AND the top-level ``categories`` / ``start_date`` / ``end_date``."""
    return F.conjoin(F.parse(filters), F.categories_in(categories), F.created_between(since, until))


async def reach(request: Request, app: str, tree: F.Node) -> list[str]:
    """The users ``tree`` reaches: the ones it names, else (``user_id: "*"``, or no user named, as an agent's
    or a run's memories in Mem0) every user of the app, at most :data:`serve_apps.mem0.filters.MAX_USERS`.
    A filter without any condition is refused: it would read every user's memories by omission."""
    users = F.users_of(tree)
    if isinstance(users, set):
        return sorted(users)
    if tree.op == "and" and not tree.children:
        raise ValidationError("filters are required: name a user_id ('*' for every user of the app)",
                              field="filters.user_id")
    found = await app_users(request, app)
    if len(found) > F.MAX_USERS:
        raise ValidationError(f"the filter reaches {len(found)} users, more than {F.MAX_USERS}: name the user_id",
                              field="filters.user_id")
    return found


def exact(tree: F.Node) -> bool:
    """Whether the shard's own filters (the user, :func:`serve_apps.mem0.filters.pushdown`) decide ``tree``."""
    kids = tree.children if tree.op == "and" else (tree,)
    return len(kids) <= MAX_FILTER_KEYS and all(
        (k.field == "user_id" and k.op in ("eq", "in")) or (k.op == "eq" and k.field in M.ENTITY_KEYS)
        or k.op == "meta_eq" for k in kids)


async def search_memories(request: Request, body: Mem0SearchRequest) -> dict[str, Any]:
    """Search every user the filter reaches; each user's ``top_k`` matches in the engine's order, merged by
    score (the relevance clamped to 0..1), plus the users' matching facts as ``relations`` with
    ``enable_graph``."""
    app = request.state.mem0_app
    check_options(body.model_extra, body.SEARCH_OPTIONS, app)
    tree = filter_tree(body.filters, body.categories)
    fields = result_fields(body.fields)
    top_k = body.top_k
    if body.limit is not None:  # Mem0 open source's name of top_k
        if "top_k" in body.model_fields_set and body.top_k != body.limit:
            raise ValidationError("limit and top_k differ; give one", field="limit")
        top_k = body.limit
    best: dict[str, dict[str, Any]] = {}
    flt = F.pushdown(tree)
    wanted = top_k if exact(tree) else MAX_RESULTS_LIMIT
    reached = await reach(request, app, tree)
    with tracing.search_span(app, top_k, True):
        for user in reached:
            options: dict[str, Any] = {"query": body.query, "max_results": wanted, "metadata_filter": flt or None,
                                       "hybrid": body.keyword_search is not False}
            # threshold 0 keeps every hit (a negative cosine scores 0); without one a dense search keeps all too
            options["similarity_threshold"] = body.threshold if body.threshold else MIN_RELEVANCE
            with tracing.span("memcluster.shard_call", memcluster__app=app):
                hits = await shards(request).search(M.user_key(app, user), options)
            # each user's top_k matches in the engine's (hybrid) order, whatever part of the filter the shard
            # applied, so a filter's shape never changes which memories a search finds
            for h in [h for h in hits if F.matches(tree, h.entry)][:top_k]:
                item = M.to_mem0(h.entry, M.score_of(h.relevance))
                if item["id"] not in best or best[item["id"]]["score"] < item["score"]:
                    best[item["id"]] = item
    ranked = sorted(best.values(), key=lambda r: (-r["score"], r["id"]))
    results = [project(r, fields) for r in ranked[:top_k]]
    if not body.enable_graph:
        return {"results": results}
    relations: dict[tuple[str, str, str], dict[str, str]] = {}
    for user in reached:
        for f in (await shards(request).search_facts(M.user_key(app, user), body.query))["facts"]:
            relations.setdefault((f["subject"], f["predicate"], f["object"]), {
                "source": f["subject"], "relationship": f["predicate"], "destination": f["object"]})
    return {"results": results, "relations": list(relations.values())}


RESULT_FIELDS = ("id", "memory", "user_id", "agent_id", "run_id", "app_id", "metadata", "categories", "immutable",
                 M.EXPIRATION, "created_at", "updated_at", "score")


def result_fields(fields: list[str] | None) -> list[str] | None:
    """The caller's ``fields``, each one of :data:`RESULT_FIELDS` (else 422 naming it)."""
    for i, name in enumerate(fields or ()):
        if name not in RESULT_FIELDS:
            raise ValidationError(f"unknown result field {name!r}: use {', '.join(RESULT_FIELDS)}", field=f"fields.{i}")
    return fields


def project(item: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    """``item`` with only its id and ``fields`` (all of it without ``fields``)."""
    return item if fields is None else {k: v for k, v in item.items() if k == "id" or k in fields}


def top_level_scope(body: Mem0SearchRequest | Mem0ListRequest) -> Any:
    """The 1.x client's request scope: entity ids sent at the top level (``user_id=...``) ANDed with ``filters``."""
    extra = body.model_extra or {}
    ids = {k: extra.pop(k) for k in ("user_id", "agent_id", "run_id", "app_id") if extra.get(k) is not None}
    if not ids:
        return body.filters
    return {"AND": [ids, body.filters]} if body.filters else ids


async def entries(request: Request, app: str, tree: F.Node) -> list[Entry]:
    """The entries ``tree`` selects across the users it reaches, newest update first."""
    found: dict[tuple[str, str], Entry] = {}
    flt = F.pushdown(tree)
    for user in await reach(request, app, tree):
        for e in await shards(request).read(M.user_key(app, user), None, flt or None):
            if F.matches(tree, e):
                found[(e.user, e.id)] = e
    return sorted(found.values(), key=lambda e: (e.updated_at, e.id), reverse=True)


async def app_users(request: Request, app: str) -> list[str]:
    """The Mem0 user ids of the app's users."""
    _, settings = app_state(request)
    users: set[str] = set()
    for shard in range(settings.shards):
        users.update(await shards(request).export_users(shard, app))
    return sorted(M.mem0_user(u) for u in users)


async def entity_memories(request: Request, app: str, kind: str, name: str) -> list[Entry]:
    """The memories of one Mem0 entity (``user``: the user's; ``agent``, ``run``, ``app``: those tagged so)."""
    if kind == "user":
        return await shards(request).read(M.user_key(app, name))
    key = M.ENTITY_KEYS[M.ENTITY_TYPES[kind]]
    out: list[Entry] = []
    for user in await app_users(request, app):
        out += await shards(request).read(M.user_key(app, user), None, {key: name})
    return out
