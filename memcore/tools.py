"""The six memory tools: JSON schemas and execution against a service; the graph and diary tools
(:mod:`memcore.graph_tools`, run against a :class:`memcore.knowledge.KnowledgeGraph`); and the archive tool
:data:`memcore.vocabulary.RECALL` (its schema and its arguments' validation, :func:`recall_args`).

Which tools are enabled and exposed per mode is the ``tools`` settings section
(:class:`memcore.app_policy.ToolPolicy`); the names are :mod:`memcore.vocabulary`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any, Protocol

import jsonschema

from memcore import tracing
from memcore.app_policy import ResolvedPolicy, ToolMode, ToolPolicy
from memcore.errors import PermissionDeniedError, ValidationError
from memcore.graph_tools import GRAPH_SCHEMAS
from memcore.graph_tools import run as run_graph_tool
from memcore.knowledge import KnowledgeGraph
from memcore.model import Entry, Kind, Memory, MemoryPatch, UserKey
from memcore.relevance import DEFAULT_FLOOR, MAX_RELEVANCE, MIN_RELEVANCE
from memcore.search_model import SearchHit, SearchOptions
from memcore.validation import check_session, validate
from memcore.vocabulary import (
    ADD,
    AGENT_TOOLS,
    CLEAR,
    DELETE,
    GRAPH_TOOLS,
    LOAD,
    MAX_RECALL_RESULTS,
    MAX_TOKENS_LIMIT,
    MIN_RELEVANCE_ARG,
    RECALL,
    SEARCH,
    UPDATE,
    function_schema,
)

_MEMORY_PROPS: dict[str, Any] = {
    "memory": {"type": "string", "description": "The memory, one self-contained statement."},
    "topics": {"type": "array", "items": {"type": "string"}, "description": "Short topic tags."},
    "memory_kind": {"type": "string", "enum": [k.value for k in Kind],
                    "description": "fact: stable preference/identity/background; episode: an event at a time."},
    "event_time": {"type": "string", "description": "When the episode happened, absolute ISO-8601 time."},
    "participants": {"type": "array", "items": {"type": "string"}, "description": "People involved."},
    "location": {"type": "string", "description": "Where the episode happened."},
}
_ID = {"memory_id": {"type": "string", "description": "The id of an existing memory."}}

SCHEMAS: dict[str, dict[str, Any]] = {
    ADD: {"description": "Save a new long-term memory about the user.",
          "properties": _MEMORY_PROPS, "required": ["memory"]},
    UPDATE: {"description": "Change an existing memory: the fields given replace the stored ones, the others "
                            "are kept.",
             "properties": {**_ID, **_MEMORY_PROPS}, "required": ["memory_id"]},
    SEARCH: {"description": "Search long-term memories. Use separate searches for multi-part questions "
                            "and check participants before relying on a result.",
             "properties": {"query": {"type": "string"},
                            "memory_kind": _MEMORY_PROPS["memory_kind"],
                            "time_from": {"type": "string", "description": "ISO-8601 lower bound of event time."},
                            "time_to": {"type": "string", "description": "ISO-8601 upper bound of event time."},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                            "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT,
                                           "description": "At most this many tokens of results in all; a "
                                                          "result that does not fit whole is cut to its "
                                                          "best-matching turns."},
                            "topics": {"type": "array", "items": {"type": "string"},
                                       "description": "Only memories with these topic tags."},
                            "topics_match": {"type": "string", "enum": ["any", "all"],
                                             "description": "any (default): at least one of the topics; "
                                                            "all: every one of them."},
                            MIN_RELEVANCE_ARG: {"type": "number", "minimum": MIN_RELEVANCE, "maximum": MAX_RELEVANCE,
                                                "description": "Only memories at least this relevant to the query "
                                                               "(their cosine, less a penalty when a memory "
                                                               "lacks the names the query gives; "
                                                               f"{MIN_RELEVANCE:g}..{MAX_RELEVANCE:g}; "
                                                               f"{DEFAULT_FLOOR:g} leaves out what does not "
                                                               "match); default: no floor."}},
             "required": ["query"]},
    LOAD: {"description": "Load the most recent memories.",
           "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": []},
    DELETE: {"description": "Delete one memory by id.", "properties": _ID, "required": ["memory_id"]},
    CLEAR: {"description": "Delete all memories of the user.", "properties": {}, "required": []},
}


RECALL_SCHEMA: dict[str, Any] = {
    "description": "Search the raw turns of the user's earlier conversations (other sessions), best match first.",
    "properties": {"query": {"type": "string", "description": "What to look for."},
                   "session": {"type": "string", "description": "The current session id; its turns are left out."},
                   "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL_RESULTS}},
    "required": ["query"],
}
_SPECS: dict[str, dict[str, Any]] = {**SCHEMAS, **GRAPH_SCHEMAS, RECALL: RECALL_SCHEMA}


def openai_schema(name: str) -> dict[str, Any]:
    """The OpenAI function schema of a memory tool, a graph tool or :data:`RECALL`."""
    spec = _SPECS[name]
    return function_schema(name, spec["description"], spec["properties"], spec["required"])


def exposed_schemas(policy: ToolPolicy, mode: ToolMode) -> list[dict[str, Any]]:
    return [openai_schema(n) for n in policy.exposed_tools(mode)]


def offered_schemas(policy: ResolvedPolicy) -> list[dict[str, Any]]:
    """The schemas of what an MCP client of the app is offered (:meth:`ResolvedPolicy.offered_tools`)."""
    return [openai_schema(n) for n in policy.offered_tools()]


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = openai_schema(name)["function"]["parameters"]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def check_arguments(name: str, arguments: Mapping[str, Any]) -> None:
    """Validate a tool call against the tool's own JSON schema (what the agent was shown); the first
    error raises :class:`ValidationError` naming ``arguments.<path>``."""
    errors = sorted(_validator(name).iter_errors(dict(arguments)), key=lambda e: list(e.path))
    if not errors:
        return
    err = errors[0]
    path = ".".join(str(p) for p in err.path)
    if err.validator == "additionalProperties":
        raise ValidationError(f"unknown argument(s): {err.message}", field="arguments")
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else ""
        raise ValidationError(f"{missing or 'an argument'} is required", field=f"arguments.{missing}".rstrip("."))
    raise ValidationError(err.message, field=f"arguments.{path}" if path else "arguments")


def recall_args(arguments: Mapping[str, Any]) -> tuple[str, str | None, int]:
    """``memory_recall``'s (query, session, max_results), checked against its schema (:func:`check_arguments`),
    then a blank query and the session id rule; a ValidationError names ``arguments.<name>``."""
    check_arguments(RECALL, arguments)
    query, session, limit = arguments["query"], arguments.get("session"), arguments.get("max_results", 10)
    if not query.strip():
        raise ValidationError("query is required", field="arguments.query")
    if session is not None:
        try:
            session = check_session(session)  # the one session rule
        except ValidationError as exc:
            raise ValidationError(str(exc), field="arguments.session") from None
    return query, session, limit


class ToolBackend(Protocol):
    def add(self, key: UserKey, memory: Memory) -> Entry: ...
    def update(self, key: UserKey, entry_id: str, memory: MemoryPatch) -> Entry: ...
    def delete(self, key: UserKey, entry_id: str) -> None: ...
    def clear(self, key: UserKey) -> int: ...
    def read(self, key: UserKey, limit: int | None = None) -> list[Entry]: ...
    def search(self, key: UserKey, options: SearchOptions) -> list[SearchHit]: ...


def memory_from_args(args: Mapping[str, Any]) -> Memory:
    """Map tool arguments (memory, memory_kind, ...) onto a validated Memory."""
    data: dict[str, Any] = {"text": args.get("memory", "")}
    for src, dst in (("topics", "topics"), ("memory_kind", "kind"), ("event_time", "event_time"),
                     ("participants", "participants"), ("location", "location")):
        if args.get(src) not in (None, ""):
            data[dst] = args[src]
    try:
        return validate(Memory, data, prefix="arguments.")
    except ValidationError as exc:
        if exc.field:
            exc.field = exc.field.replace("arguments.text", "arguments.memory").replace("arguments.kind",
                                                                                       "arguments.memory_kind")
        raise


def patch_from_args(args: Mapping[str, Any]) -> MemoryPatch:
    """Map ``memory_update`` arguments onto a patch: only the arguments given change the memory."""
    data = {dst: args[src] for src, dst in _ARG_FIELDS if src in args}
    try:
        return validate(MemoryPatch, data, prefix="arguments.")
    except ValidationError as exc:
        if exc.field:
            for dst, src in ((d, s) for s, d in _ARG_FIELDS):
                exc.field = exc.field.replace(f"arguments.{dst}", f"arguments.{src}")
        if exc.field == "arguments" and "nothing to update" in exc.message:
            exc.message = "nothing to update: give memory, topics, memory_kind, event_time, participants or location"
        raise


_ARG_FIELDS = (("memory", "text"), ("topics", "topics"), ("memory_kind", "kind"), ("event_time", "event_time"),
               ("participants", "participants"), ("location", "location"))


def search_options_from_args(args: Mapping[str, Any]) -> SearchOptions:
    kind = args.get("memory_kind") or None
    data: dict[str, Any] = {"query": args.get("query", ""), "kind": kind, "hybrid": True, "deduplicate": True,
                            "kind_fallback": kind is not None, "max_results": args.get("limit") or 10}
    for f in ("time_from", "time_to", "topics", "topics_match", "max_tokens"):
        if args.get(f):
            data[f] = args[f]
    if args.get(MIN_RELEVANCE_ARG) is not None:
        data["similarity_threshold"] = args[MIN_RELEVANCE_ARG]
    return validate(SearchOptions, data, prefix="arguments.")


_Get = Callable[[str], Any]
_ENTRY_FIELDS: dict[str, Callable[[_Get], Any]] = {
    "memory_id": lambda get: get("id"),
    "memory": lambda get: get("text"),
    "topics": lambda get: list(get("topics") or []),
    "memory_kind": lambda get: getattr(get("kind"), "value", get("kind")),
    "event_time": lambda get: _iso(get("event_time")),
    "participants": lambda get: list(get("participants") or []),
    "location": lambda get: get("location"),
    "metadata": lambda get: dict(get("metadata") or {}),
    "updated_at": lambda get: _iso(get("updated_at")),
}
TOOL_FIELDS = ("memory_id", "memory", "topics", "memory_kind", "event_time", "participants", "location", "updated_at")
"""An entry in a tool result (``memory_search``, ``memory_load``)."""
RESOURCE_FIELDS = ("memory_id", "memory", "memory_kind", "topics", "metadata", "updated_at")
"""An entry in MCP's newest-memories resource."""


def entry_json(entry: Entry | Mapping[str, Any] | object, fields: Sequence[str] = TOOL_FIELDS,
               score: float | None = None) -> dict[str, Any]:
    """The one entry-to-JSON function of the agent-facing shapes: ``fields`` (:data:`TOOL_FIELDS`,
    :data:`RESOURCE_FIELDS`) of an :class:`Entry` (or any object with its field names, such as
    memclient's), or of the HTTP API's JSON of one (a mapping), plus ``score`` when given. The HTTP
    API's own shape is the entry's model dump."""
    get: _Get = entry.get if isinstance(entry, Mapping) else (lambda k: getattr(entry, k, None))
    out = {name: _ENTRY_FIELDS[name](get) for name in fields}
    if score is not None:
        out["score"] = round(score, 6)
    return out


def _hit_json(h: SearchHit) -> dict[str, Any]:
    out = entry_json(h.entry, score=h.score)
    if h.relevance is not None:
        out["relevance"] = round(h.relevance, 6)
    if h.cut:
        out["cut_turns"] = len(h.cut)
    return out


def _iso(t: datetime | str | None) -> str | None:
    return t.isoformat() if isinstance(t, datetime) else t


def execute(
    backend: ToolBackend, key: UserKey, name: str, arguments: Mapping[str, Any], *, enabled: Sequence[str],
    graph: KnowledgeGraph | None = None, agent: str | None = None,
) -> dict[str, Any]:
    """Run one tool call (a graph tool against ``graph``; ``agent``: the caller's agent name, the diary's
    default). Disabled tool → PermissionDeniedError; bad arguments → ValidationError."""
    if name not in AGENT_TOOLS:
        raise ValidationError(f"unknown tool {name!r}", field="name")
    if name not in enabled:
        raise PermissionDeniedError(f"tool {name} is disabled for this app", field="name")
    if not isinstance(arguments, Mapping):
        raise ValidationError("arguments must be an object", field="arguments")
    check_arguments(name, arguments)
    if name in GRAPH_TOOLS:
        if graph is None:
            raise PermissionDeniedError(f"tool {name} needs the knowledge graph, which this backend lacks",
                                        field="name")
        return dict(run_graph_tool(graph, key, name, arguments, agent=agent))
    if name == ADD:
        e = backend.add(key, memory_from_args(arguments))
        return {"status": "ok", "memory_id": e.id, "memory": e.text}
    if name == UPDATE:
        mid = _require_id(arguments)
        e = backend.update(key, mid, patch_from_args(arguments))
        return {"status": "ok", "memory_id": e.id, "previous_id": mid, "memory": e.text}
    if name == SEARCH:
        opts = search_options_from_args(arguments)
        with tracing.search_span(key.app, opts.max_results, opts.hybrid):
            hits = backend.search(key, opts) if opts.query.strip() else []
        return {"results": [_hit_json(h) for h in hits], "count": len(hits)}
    if name == LOAD:
        limit = arguments.get("limit", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
            raise ValidationError("limit must be an integer from 1 to 100", field="arguments.limit")
        entries = backend.read(key, limit)
        return {"results": [entry_json(e) for e in entries], "count": len(entries)}
    if name == DELETE:
        mid = _require_id(arguments)
        backend.delete(key, mid)
        return {"status": "ok", "memory_id": mid}
    cleared = backend.clear(key)
    return {"status": "ok", "cleared": cleared}


def _require_id(arguments: Mapping[str, Any]) -> str:
    mid = arguments.get("memory_id")
    if not isinstance(mid, str) or not mid:
        raise ValidationError("memory_id is required", field="arguments.memory_id")
    return mid
