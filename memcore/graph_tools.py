"""The knowledge-graph and diary tools (:data:`memcore.vocabulary.GRAPH_TOOLS`): their JSON schemas, which
take the arguments of seed 002's MemPalace tools (``mempalace_kg_add`` and the rest, plus a few optional
extras), and how a checked call runs against a :class:`memcore.knowledge.KnowledgeGraph`.

:func:`memcore.tools.execute` checks a call against its schema and the app's switches, then runs it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memcore.errors import ValidationError
from memcore.graph import (
    DEFAULT_AGENT,
    DEFAULT_DIARY_RESULTS,
    DEFAULT_RESULTS,
    DIRECTIONS,
    MAX_DIARY_RESULTS,
    MAX_RESULTS,
    parse_time,
)
from memcore.knowledge import KnowledgeGraph, diary_json, fact_json
from memcore.model import UserKey
from memcore.vocabulary import DIARY_READ, DIARY_WRITE, KG_ADD, KG_INVALIDATE, KG_QUERY, KG_TIMELINE

_S = {"type": "string"}
_DATE = "a date YYYY-MM-DD or an ISO-8601 date-time"
_TRIPLE = {"subject": {**_S, "description": "Subject entity."},
           "predicate": {**_S, "description": "Relationship type, e.g. lives_in, works_at, likes."},
           "object": {**_S, "description": "Object entity."}}
_KNOWN_AT = {**_S, "description": f"Optional record time ({_DATE}): what was believed then (default: now)."}

GRAPH_SCHEMAS: dict[str, dict[str, Any]] = {
    DIARY_WRITE: {
        "description": "Write an agent diary entry (runtime observations, task progress, interim summaries). "
                       "Diary entries are the agent's own notes: not returned by memory search.",
        "properties": {"agent_name": {**_S, "description": "Agent name. Defaults to the current agent."},
                       "entry": {**_S, "description": "Diary entry content."},
                       "topic": {**_S, "description": "Topic tag. Default: general."},
                       "wing": {**_S, "description": "Optional wing (a grouping of entries)."}},
        "required": ["entry"]},
    DIARY_READ: {
        "description": "Read an agent's recent diary entries, newest first.",
        "properties": {"agent_name": {**_S, "description": "Agent name. Defaults to the current agent."},
                       "last_n": {"type": "integer", "minimum": 1, "maximum": MAX_DIARY_RESULTS,
                                  "description": f"Number of recent entries. Default: {DEFAULT_DIARY_RESULTS}."},
                       "wing": {**_S, "description": "Optional wing filter."},
                       "since": {**_S, "description": f"Optional: entries written at or after ({_DATE})."},
                       "until": {**_S, "description": f"Optional: entries written at or before ({_DATE})."}},
        "required": []},
    KG_ADD: {
        "description": "Add a fact subject -> predicate -> object to the user's knowledge graph (adding the same "
                       "fact again changes nothing). With supersede, the fact replaces the current object of "
                       "the subject's predicate (e.g. a move to another city), keeping the old one as history.",
        "properties": {**_TRIPLE,
                       "valid_from": {**_S, "description": f"Optional start ({_DATE})."},
                       "valid_to": {**_S, "description": f"Optional end ({_DATE})."},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                                      "description": "Optional confidence score 0.0-1.0."},
                       "source_file": {**_S, "description": "Optional provenance source file."},
                       "source_drawer_id": {**_S, "description": "Optional provenance: the memory id it came from."},
                       "supersede": {"type": "boolean", "description": "Replace the current object of this "
                                                                       "subject and predicate (default false)."}},
        "required": ["subject", "predicate", "object"]},
    KG_QUERY: {
        "description": "Query the knowledge graph for an entity's relationships (names match case-insensitively "
                       "and by alias; an unknown entity has none).",
        "properties": {"entity": {**_S, "description": "Entity to query."},
                       "as_of": {**_S, "description": f"Optional valid time ({_DATE}): only facts true then."},
                       "direction": {**_S, "enum": list(DIRECTIONS),
                                     "description": "outgoing, incoming, or both. Default: both."},
                       "predicate": {**_S, "description": "Optional: only this relationship type."},
                       "known_at": _KNOWN_AT,
                       "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS}},
        "required": ["entity"]},
    KG_TIMELINE: {
        "description": "Knowledge-graph facts in chronological order, optionally for one entity: how its "
                       "relationships changed over time.",
        "properties": {"entity": {**_S, "description": "Optional entity to filter the timeline for."},
                       "known_at": _KNOWN_AT,
                       "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS}},
        "required": []},
    KG_INVALIDATE: {
        "description": "Mark a current fact as no longer true from a date on; its history is kept.",
        "properties": {**_TRIPLE, "ended": {**_S, "description": f"Optional end ({_DATE}). Default: now."}},
        "required": ["subject", "predicate", "object"]},
}


def _renamed(exc: ValidationError, names: Mapping[str, str]) -> ValidationError:
    """``exc`` with its field named as the tool's argument (``arguments.<name>``)."""
    field = exc.field or ""
    head, _, rest = field.partition(".")
    exc.field = f"arguments.{names.get(head, head)}{'.' + rest if rest else ''}" if field else "arguments"
    return exc


_FACT_ARGS = {"memories": "source_drawer_id", "source": "source_file"}
_DIARY_ARGS = {"agent": "agent_name", "text": "entry", "limit": "last_n"}


def _triple(args: Mapping[str, Any]) -> str:
    return f"{args['subject']} -> {args['predicate']} -> {args['object']}"


def run(kg: KnowledgeGraph, key: UserKey, name: str, args: Mapping[str, Any], *, agent: str | None = None) -> Any:
    """Run a graph tool call already checked against its schema; ``agent``: the calling agent's name (the
    diary's default agent). Bad values raise ValidationError naming ``arguments.<name>``."""
    try:
        return _run(kg, key, name, args, agent or DEFAULT_AGENT)
    except ValidationError as exc:
        raise _renamed(exc, {**_FACT_ARGS, **_DIARY_ARGS}) from None


def _run(kg: KnowledgeGraph, key: UserKey, name: str, args: Mapping[str, Any], agent: str) -> Any:
    now = kg.now()
    if name == KG_ADD:
        spec: dict[str, Any] = {k: args[k] for k in ("subject", "predicate", "object", "valid_from", "valid_to",
                                                       "confidence") if args.get(k) is not None}
        if args.get("source_file"):
            spec["source"] = args["source_file"]
        if args.get("source_drawer_id"):
            spec["memories"] = [args["source_drawer_id"]]
        if args.get("supersede"):
            fact, closed, created = kg.supersede(key, spec, writer="agent")
        else:
            (fact, created), closed = kg.add(key, spec, writer="agent"), []
        return {"success": True, "triple_id": fact.fact_id, "fact": _triple(args), "created": created,
                "closed": [fact_json(c, now) for c in closed]}
    if name == KG_INVALIDATE:
        closed = kg.invalidate(key, {k: args[k] for k in ("subject", "predicate", "object", "ended") if k in args})
        ended = parse_time(args.get("ended"), "ended") or now
        return {"success": True, "fact": _triple(args), "ended": ended.isoformat(), "invalidated": len(closed)}
    if name == KG_QUERY:
        q = {k: args[k] for k in ("entity", "as_of", "direction", "predicate", "known_at", "limit") if k in args}
        facts = kg.query(key, q)
        ent = kg.entity(key, args["entity"])
        return {"entity": args["entity"], "as_of": args.get("as_of"),
                "facts": [fact_json(f, now, ent.key if ent else None) for f in facts], "count": len(facts)}
    if name == KG_TIMELINE:
        facts = kg.timeline(key, args.get("entity") or None, known_at=args.get("known_at"),
                            limit=args.get("limit", DEFAULT_RESULTS))
        return {"entity": args.get("entity") or "all", "timeline": [fact_json(f, now) for f in facts],
                "count": len(facts)}
    if name == DIARY_WRITE:
        entry = kg.write_diary(key, {"agent": args.get("agent_name") or agent, "text": args["entry"],
                                     "topic": args.get("topic") or "general", "wing": args.get("wing")})
        return {"success": True, "entry_id": entry.id, "agent": entry.agent, "topic": entry.topic}
    if name == DIARY_READ:
        who = args.get("agent_name") or agent
        entries, total = kg.read_diary(key, {"agent": who, "limit": args.get("last_n") or DEFAULT_DIARY_RESULTS,
                                             "wing": args.get("wing") or None, "since": args.get("since"),
                                             "until": args.get("until")})
        out: dict[str, Any] = {"agent": who, "entries": [diary_json(e) for e in entries], "total": total,
                               "showing": len(entries)}
        if not entries:
            out["message"] = "No diary entries yet."
        return out
    raise ValidationError(f"unknown graph tool {name!r}", field="name")
