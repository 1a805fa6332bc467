"""Mem0's add, written into memcluster: messages stored as given (``infer: false``) or ingested as a session
and extracted (``infer: true``, waiting for the job), then given the request's metadata, scope and
``timestamp``. The routes are :mod:`serve_apps.mem0.api`'s."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from fastapi import Request

from memcore.errors import NotFoundError, ValidationError
from memcore.fields import now_utc
from serve_apps.deps import shards
from serve_apps.mem0 import map as M
from serve_apps.mem0.models import Mem0AddRequest, check_options

INFER_TIMEOUT_S = 60.0
"""How long an ``infer: true`` add waits for its extraction job before answering ``PENDING``."""


async def add_memories(request: Request, body: Mem0AddRequest) -> dict[str, Any]:
    """Mem0's add: each message stored as given (``infer`` false) or the messages extracted as a session
    (:func:`infer`), then stamped with the request's ``timestamp`` (:func:`stamp`)."""
    app = request.state.mem0_app
    check_options(body.model_extra, body.ADD_OPTIONS, app)
    created = M.timestamp_of(body.timestamp, now_utc())
    entities = body.entities()
    user = entities.get("user_id")
    if not isinstance(user, str):
        raise ValidationError("user_id is required (memcluster scopes every memory by user)", field="user_id")
    M.user_key(app, user)
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
        entries, _ = await shards(request).add_many(M.user_key(app, user), memories)
        unique = {e.id: e for e in entries}
        await stamp(request, app, user, list(unique), created, created=True)
        return {"results": [{"id": M.mem0_id(user, e.id), "memory": e.text, "event": "ADD"} for e in unique.values()]}
    results = await infer(request, app, user, entities.get("run_id"), messages, meta, created)
    for event, new in (("ADD", True), ("UPDATE", False)):
        written = [M.split_id(r["id"])[1] for r in results if r.get("id") and r["event"] == event]
        await stamp(request, app, user, written, created, created=new)
    return {"results": results}


async def stamp(request: Request, app: str, user: str, entry_ids: list[str], at: datetime | None, *,
                created: bool) -> None:
    """Give the entries the caller's ``timestamp``: ``created_at`` and ``updated_at`` of a new memory
    (``created``), ``updated_at`` of an updated one; written back as they are (the shard's restore)."""
    if at is None or not entry_ids:
        return
    key = M.user_key(app, user)
    entries = [await shards(request).get(key, eid) for eid in dict.fromkeys(entry_ids)]
    stamped = [e.model_copy(update={"created_at": at, "updated_at": at} if created or at < e.created_at
                            else {"updated_at": at}) for e in entries]
    await shards(request).restore(key, stamped)


async def infer(request: Request, app: str, user: str, run: Any, messages: list[dict[str, str]],
                meta: dict[str, Any], said_at: datetime | None = None) -> list[dict[str, Any]]:
    """Ingest the messages as a session (``run_id``, else ``mem0``; the turns said at ``said_at``, else
    now), wait for the extraction job, then give the entries it wrote the request's metadata and scope
    (:func:`tag_entry`)."""
    client = shards(request)
    key = M.user_key(app, user)
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
            tagged = await tag_entry(request, app, user, eid, meta, "ADD", base, other_scope_only=True)
            out += [tagged] if tagged else []
        elif op.status != "applied":
            continue
        elif action == "delete" and op.memory_id:
            out.append({"id": M.mem0_id(user, op.memory_id), "memory": None, "event": "DELETE"})
        elif action in ("add", "update") and eid:
            tagged = await tag_entry(request, app, user, eid, meta, "ADD" if action == "add" else "UPDATE", base)
            out += [tagged] if tagged else []
    return out


async def tag_entry(request: Request, app: str, user: str, entry_id: str, meta: dict[str, Any], event: str,
                    since: datetime, *, other_scope_only: bool = False) -> dict[str, Any] | None:
    """Give an extracted entry the request's metadata, in the request's scope. An entry of that scope gets
    the metadata (same text: the id does not change); an entry of another scope (or none) is never moved:
    the memory is written under the request's scope key instead (:func:`serve_apps.mem0.map.scope_key`; no
    key without a scope), and the extracted entry is removed only when this job created it (``created_at``
    from ``since`` on).
    ``other_scope_only`` (a skipped duplicate): None when the entry already is in the request's scope."""
    try:
        entry = await shards(request).get(M.user_key(app, user), entry_id)
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
        scoped, _ = await shards(request).add(M.user_key(app, user), copy)
        if entry.item_key is None and entry.created_at >= since:
            await shards(request).delete(M.user_key(app, user), entry.id, True)
        return {"id": M.mem0_id(user, scoped.id), "memory": scoped.text, "event": event}
    if other_scope_only:
        return None
    if meta and entry.metadata != {**entry.metadata, **meta}:
        entry, _ = await shards(request).update(M.user_key(app, user), entry_id,
                                                {"metadata": {**entry.metadata, **meta}})
    return {"id": M.mem0_id(user, entry.id), "memory": entry.text, "event": event}
