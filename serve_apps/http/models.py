"""Request and response models of the HTTP API (what ``/openapi.json`` documents).

The request bodies reuse the domain models (:class:`memcore.model.Memory`,
:class:`memcore.search_model.SearchOptions`) so the HTTP layer validates exactly what the service
validates; the subclasses here only add field descriptions and examples.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from memcore import jsontext
from memcore.app_policy import MemorySwitch, ToolMode
from memcore.errors import ValidationError
from memcore.extraction.events import MessageBatch
from memcore.fields import SessionId, check_topics, encodable
from memcore.metadata import MetadataError, Scalar, check_filter
from memcore.model import Entry, InjectionMode, Memory, MemoryPatch, PreloadStrategy
from memcore.records import JobReason, JobStatus, RecallHit
from memcore.relevance import DEFAULT_FLOOR, MAX_RELEVANCE, MIN_RELEVANCE, NAME_PENALTY
from memcore.search_model import SearchOptions, TopicsMatch
from memcore.vocabulary import MAX_RECALL_RESULTS, MAX_TOKENS_LIMIT

MAX_READ_LIMIT = 1000
DEFAULT_READ_LIMIT = 100

MetadataFilterQuery = Annotated[str | None, Query(
    description='A JSON object of metadata equalities, e.g. `{"agent_id": "planner"}` (AND of all keys).')]


def parse_metadata_filter(raw: str | None) -> dict[str, Scalar] | None:
    """The ``metadata_filter`` query parameter (JSON text) as a validated filter; 422 naming the field."""
    if raw is None or not raw.strip():
        return None
    try:
        value = jsontext.loads(raw)
    except jsontext.JSONTextError as exc:
        raise ValidationError(f"metadata_filter: {exc}", field="metadata_filter") from None
    try:
        return check_filter(value)
    except MetadataError as exc:
        raise ValidationError(str(exc), field=exc.field) from None


def _describe(descriptions: dict[str, str], example: dict[str, Any] | None = None) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` hook that documents inherited fields without redefining them."""

    def hook(schema: dict[str, Any]) -> None:
        props = schema.get("properties", {})
        for name, text in descriptions.items():
            if name in props:
                props[name].setdefault("description", text)
        if example is not None:
            schema["examples"] = [example]

    return hook


_MEMORY_DOCS = {
    "text": "The memory, one self-contained statement (1..8192 UTF-8 bytes after trimming).",
    "topics": "Short topic tags (at most 32, each up to 64 characters); not part of the memory's identity.",
    "kind": "`fact`: stable preference, identity or background; `episode`: something that happened at a time.",
    "event_time": "When the episode happened, ISO-8601 (a naive time is taken as UTC).",
    "participants": "People involved (at most 64).",
    "location": "Where the episode happened (up to 256 characters).",
    "source": "Who the memory is about or came from: `user` or `assistant`.",
    "provenance": "Refs of the conversation turns the memory came from, `<session>/<event_id>` (a bare "
                  "event id names that id in any session; at most 1024).",
    "metadata": "A small JSON object kept with the memory (at most 32 keys of letters, digits, `_`, `-`; 4096 bytes "
                "of JSON); not part of the memory's identity; filterable by equality (`metadata_filter`).",
    "key": "An optional caller key (1..512 characters): the memory's identity becomes (app, user, key), so a "
           "later write with the same key replaces this memory (text, metadata and all) instead of adding one.",
    "ttl_s": "Lifetime in seconds from this write (0 < ttl_s <= about 100 years): afterwards no read returns the "
             "memory and the maintenance sweep deletes it. Every add sets it anew (left out: never expires).",
    "expires_at": "Instead of `ttl_s`: when the memory expires, ISO-8601 (naive is UTC), after this write; not both.",
}
_PATCH_DOCS = {
    **_MEMORY_DOCS,
    "ttl_s": "Restart the lifetime: the memory expires ttl_s seconds after this update (0 < ttl_s <= about 100 "
             "years; null is refused). Left out (and no `expires_at`): the expiry is kept.",
    "expires_at": "A new expiry, ISO-8601, after this update; `null` removes the expiry (never expires). Not with "
                  "`ttl_s`. Changing only the expiry keeps the id.",
}
_ENTRY_DOCS = {
    **_MEMORY_DOCS,
    "id": "Content-addressed id: sha256 over the normalised text, scope and episodic metadata (or over scope "
          "and `key` when a key is given).",
    "app": "The application the memory belongs to.",
    "user": "The user the memory belongs to.",
    "created_at": "When the memory was first stored.",
    "updated_at": "When the memory was last written (re-adding identical content refreshes it).",
    "deleted_at": "Soft-delete tombstone; always null in responses (deleted entries are invisible).",
    "expires_at": "When the memory expires (set by `ttl_s` / `expires_at` of the add or a later update); null: never.",
}
_SEARCH_DOCS = {
    "include_facts": "Also return the current knowledge-graph facts of the entities the query names, as a "
                     "separate `facts` list; they take their tokens from `max_tokens` first (at most half).",
    "query": "Free text. Keyword-index syntax (quotes, AND, field:value) is taken literally, never parsed.",
    "kind": "Only entries of this kind (see `kind_fallback`).",
    "time_from": "Lower bound of the event time, ISO-8601 (inclusive).",
    "time_to": "Upper bound of the event time, ISO-8601 (inclusive).",
    "max_results": "How many hits to return (1..1000).",
    "max_tokens": ("At most this many tokens of hit text in all: hits in rank order while they fit, the next one "
                   "cut to its best-matching turns (see `cut`); default: the app's setting (none: no budget)."),
    "similarity_threshold": ("Keep only hits whose `relevance` (-1..1) is at least this, in hybrid and dense "
                             "search; default: 0.3 on the cosine in dense search (hybrid=false), no floor in "
                             f"hybrid. {DEFAULT_FLOOR:g} is the floor measured for the default embedder."),
    "order_by_event_time": "Return the hits ordered by event time instead of by score.",
    "deduplicate": "Drop near-duplicates (word-set Jaccard >= 0.80), keeping the higher score.",
    "kind_fallback": "With `kind` set and fewer than 3 hits, merge an unfiltered search (requested kind first).",
    "hybrid": "Fuse dense vectors and BM25 keywords with reciprocal rank fusion.",
    "rrf_k": "The k of reciprocal rank fusion: each list adds weight / (k + rank + 1) (default: the service's, 10).",
    "dense_weight": "Weight of the dense list in the fusion; 0 searches BM25 only (default: the service's, 1).",
    "keyword_weight": "Weight of the BM25 list in the fusion; 0 searches vectors only (default: the service's, 2).",
    "keyword_query": "`content`: BM25 searches the query without stop and question words; `raw`: as given.",
    "date_boost": "A query naming a day or month also searches that period, fused in (default: on).",
    "merge_overlapping": "Merge verbatim windows that share turns into one hit (default: on).",
    "metadata_filter": "Only memories whose metadata has every `key: value` given (string, integer or boolean).",
    "topics": "Only memories with these topics (exact values), a filter in every store; see `topics_match`.",
    "topics_match": "`any`: memories with at least one of `topics`; `all`: with every one of them.",
}


class MemoryRequest(Memory):
    """A memory to store: its text plus optional episodic metadata. Ids and times are assigned by the service."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=_describe(
            _MEMORY_DOCS,
            {"text": "Alice moved to Lisbon in March 2024.", "topics": ["home"], "kind": "episode",
             "event_time": "2024-03-01T00:00:00Z", "participants": ["Alice"], "location": "Lisbon"},
        ),
    )


class MemoryUpdateRequest(MemoryPatch):
    """What to change: any of text, topics, kind, event_time, participants, location, metadata, key, and the
    expiry (``ttl_s`` or ``expires_at``; at least one field). Fields left out keep their stored value; a
    changed text or episodic field rotates the id."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=_describe(_PATCH_DOCS, {"topics": ["home", "moves"]}),
    )


class EntryModel(Entry):
    """A stored memory: the memory plus its id, scope and timestamps."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_describe(_ENTRY_DOCS))


class SearchRequest(SearchOptions):
    """A search over the user's memories; every field but ``query`` is optional."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=_describe(_SEARCH_DOCS, {"query": "Where does Alice live?", "max_results": 5}),
    )

    def options(self) -> SearchOptions:
        """The plain domain object (what the shards receive)."""
        return SearchOptions.model_validate(self.model_dump())


class EntryList(BaseModel):
    """Active memories of the user, newest ``updated_at`` first."""

    entries: list[EntryModel]


class Hit(BaseModel):
    """One search result."""

    entry: EntryModel
    score: float = Field(description="The rank score: the fused RRF score (hybrid) or the cosine (dense search).")
    relevance: float = Field(description=(
        "How well the memory matches the query, -1..1, for every hit (the ones only keywords found included): "
        f"the cosine of their embedding vectors, less {NAME_PENALTY:g} when the memory contains none of the names "
        "the query gives (its capitalised words that start no sentence; a share of it when it lacks some); what "
        "`similarity_threshold` filters on."))
    merged: list[str] = Field(default_factory=list, description=(
        "Ids of further verbatim windows merged into this hit (its text and provenance are their union)."))
    cut: list[str] = Field(default_factory=list, description=(
        "Turn refs left out of this hit's text to fit `max_tokens` (its provenance holds exactly the turns kept)."))


class SearchResponse(BaseModel):
    """Search results, best first (or by event time when asked)."""

    hits: list[Hit]
    facts: list[dict[str, Any]] | None = Field(default=None, description=(
        "With `include_facts`: the current knowledge-graph facts of the entities the query names (each with "
        "its provenance: `memories`, `turns`, `source`, and its `text`), newest first."))


class PreloadRequest(BaseModel):
    """What to preload into the next model request of the user."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"budget": 10, "message": "Any ideas for my trip?", "mode": "system"}]},
    )

    budget: Annotated[int, Field(ge=-1, le=1000)] = Field(
        default=10, description="0: off; -1: every memory; N > 0: at most N memories (searched when more exist)."
    )
    message: str = Field(default="", description="The user's current message; the search query when needed.")
    max_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)] | None = Field(default=None, description=(
        "The whole block (playbook and frame included) fits this many tokens; below the frame: 422. "
        "Default: the app's setting (none: no budget)."))
    mode: InjectionMode = Field(
        default=InjectionMode.SYSTEM, description="Where the client injects the text: system or user message."
    )
    playbook: str | None = Field(
        default=None, description="Instructions placed before the memories; null or empty keeps the default."
    )
    topics: list[str] | None = Field(
        default=None, description="Only memories with these topics (exact values); see `topics_match`."
    )
    topics_match: TopicsMatch = Field(
        default="any", description="`any`: memories with at least one of `topics`; `all`: with every one."
    )
    min_relevance: Annotated[float, Field(ge=MIN_RELEVANCE, le=MAX_RELEVANCE)] | None = Field(
        default=None, description=(
            "A relevance floor (the hits' `relevance`, -1..1): the message is searched, and when no memory is at "
            "least this relevant nothing is injected (strategy `none`), else the hits are. "
            f"{DEFAULT_FLOOR:g} is the floor measured for the default embedder. Default: no floor (the budget "
            "rules alone)."))
    include_facts: bool = Field(default=False, description=(
        "Also render the current knowledge-graph facts of the entities the message names after the memories "
        "(their tokens taken from `max_tokens` first, at most half)."))

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str] | None) -> list[str] | None:
        return check_topics(v) or None if v is not None else None

    @field_validator("message", "playbook")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        return None if v is None else encodable(v, "text")


class PreloadResponse(BaseModel):
    """The memories chosen and their rendering."""

    entries: list[EntryModel]
    text: str = Field(description="The memory block to inject (empty when nothing was chosen).")
    mode: InjectionMode
    strategy: PreloadStrategy = Field(
        description="off, all, search, recent, failed (a failed probe injects nothing), or none (nothing met "
                    "`min_relevance`)."
    )
    cut: dict[str, list[str]] = Field(default_factory=dict, description=(
        "Memory id → the turn ids left out of its text to fit `max_tokens` (only memories that were cut)."))


class ToolList(BaseModel):
    """OpenAI function-calling schemas of the tools the app exposes to agents, and the app's tool mode."""

    tools: list[dict[str, Any]]
    mode: ToolMode = Field(description="The app's tool mode (agentic or auto), set by the deployment.")
    memory: MemorySwitch = Field(description="The app's memory switch.")


class ToolCallRequest(BaseModel):
    """One tool call, as the model produced it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"arguments": {"memory": "User prefers green tea."}}]},
    )

    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments (JSON object).")
    mode: ToolMode | None = Field(default=None, description="Optional; the app's tool mode is a deployment setting "
                                                           "(`memory` settings): any other value is 403.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    shards: list[dict[str, Any]] = Field(description="One status object per shard.")


class ErrorBody(BaseModel):
    """The one error shape of the API."""

    error: str = Field(description="Error class, e.g. ValidationError, NotFoundError, StoreError.")
    field: str | None = Field(default=None, description="The input field or key the error is about.")
    message: str = Field(description="What went wrong, for humans.")


# ---------------------------------------------------------------- auto memory
class IngestRequest(MessageBatch):
    """A session's messages as the agent holds them: OpenAI chat messages (``role``, ``content`` as a
    string or content parts, ``tool_calls``, ``tool_call_id``, ``name``), plus optional ``id``,
    ``timestamp`` and ``external_context`` (true on messages that carry retrieved knowledge).

    Messages without an ``id`` are told apart by the server: when the session's archived turns begin
    the batch (or the batch begins them) it is the whole session resent and only the rest is new; when
    the archive's last two or more turns begin it, it is a trimmed window resent; otherwise every
    message is new and appended, even one that repeats an earlier text such as "yes". A message
    without ``timestamp`` is stamped with the time of receipt (monotonic within the session); a
    timestamp more than ``extractor.clock_skew_s`` ahead of the server's clock is a 422. Only
    user/assistant text is archived and extracted: tool messages, tool calls and system prompts never
    become memories. A job extracts every archived turn not extracted yet, in arrival order.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [
            {"events": [
                {"role": "user", "content": "I moved to Lisbon last month."},
                {"role": "assistant", "content": "Congratulations on the move to Lisbon!"},
            ]},
            {"events": [
                {"id": "e1", "role": "user", "content": "We upgraded production to Go 1.24.",
                 "timestamp": "2026-07-20T09:00:00Z"},
                {"id": "e2", "role": "assistant", "content": "Noted: production runs Go 1.24.",
                 "timestamp": "2026-07-20T09:00:05Z"},
            ]},
        ]},
    )


class JobModel(BaseModel):
    """An ingest job: queued → running → done | partial | failed, or skipped at ingest."""

    job_id: str = Field(description="Opaque id; `GET /v1/jobs/{job_id}` reports the job.")
    status: JobStatus = Field(description=(
        "queued, running, done, partial (extracted, cursor moved, but some operations failed: see "
        "`operations` and `errors`), failed (nothing written, cursor unchanged) or skipped (no-op)."))
    app: str
    user: str
    session: str
    seq: int = Field(description="Ingest order within the shard.")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    sync: bool = Field(description="True when the queue was full and the ingest request waited for the job.")
    attempts: int = Field(description="Runs started (more than 1 after a shard restart re-queued it).")
    upto: datetime | None = Field(default=None, description="The newest timestamp among the turns this job extracts.")
    upto_seq: int | None = Field(default=None, description="The delta bound: the job extracts the session's "
                                                           "unextracted turns that arrived up to this number.")
    reason: str | None = Field(default=None, description="Why the job was skipped, partial or failed.")
    reason_code: JobReason | None = Field(
        default=None, description=f"The reason as a code: {', '.join(get_args(JobReason))}.")
    operations: list[dict[str, Any]] = Field(
        description="One result per proposed operation: index, type, status (applied | skipped | failed), "
                    "action, memory_id, effective_id, reason, error.")
    errors: list[str] = Field(description="Job error, failed operations, rejected tool calls, stage failures.")
    counts: dict[str, int]
    cursor: datetime | None = Field(
        default=None, description="The session's last_extract_at after the job (moves only when it is done).")


class RecallRequest(BaseModel):
    """Search the raw archived turns of the user's other sessions."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"query": "which Go version runs in production?", "session": "s-42",
                                         "max_results": 5}]},
    )

    query: str = Field(min_length=1, max_length=4096, description="Free text (BM25 over the turns' words).")
    session: SessionId | None = Field(default=None, description="The current session (the session id rule): "
                                                             "its turns are left out.")
    max_results: int = Field(default=10, ge=1, le=MAX_RECALL_RESULTS, description="How many turns to return.")

    @field_validator("query")
    @classmethod
    def _text(cls, v: str) -> str:
        return encodable(v, "text")


class RecallResponse(BaseModel):
    """Matching turns, best first."""

    hits: list[RecallHit]
