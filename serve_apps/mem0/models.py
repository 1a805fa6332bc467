"""Request bodies of the Mem0-compatible API (:mod:`serve_apps.mem0.api`), as ``mem0ai``'s client sends them.

No parameter is silently ignored: each body declares what it applies; every other parameter is checked
against :data:`OPTIONS` (:func:`check_options`): a value memcluster already behaves as (``rerank=false``,
``latest_only=true``, ``async_mode``: ``add`` always finishes before it answers) is accepted, anything
else is 422 naming the parameter and saying why; a parameter Mem0 does not have is 422 too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memcore.errors import ValidationError
from memcore.fields import MAX_TEXT_BYTES, encodable

MAX_MESSAGES = 100
MAX_BATCH = 1000
"""At most this many memories in one batch update or delete (Mem0's limit)."""
ROLES = ("user", "assistant", "system")


@dataclass(frozen=True)
class Option:
    """A Mem0 parameter memcluster does not apply itself: ``accepts`` says which values it already behaves as
    (None: none); any other value is refused with ``why``."""

    why: str
    accepts: Callable[[Any], bool] | None = None


def _falsy(v: Any) -> bool:
    return v is None or v is False


OPTIONS: dict[str, Option] = {
    "async_mode": Option("", lambda v: isinstance(v, bool) or v is None),
    "version": Option("the v2 API (Mem0's v2 filters, v3 routes) is served", lambda v: v in (None, "v2", "v3")),
    "output_format": Option("only output_format 'v1.1' (results in a 'results' list) is served",
                            lambda v: v in (None, "v1.1")),
    "rerank": Option("memcluster has no reranker: results are ranked by relevance", _falsy),
    "enable_graph": Option("graph memory is not supported", _falsy),
    "immutable": Option("every memcluster memory can be updated", _falsy),
    "show_expired": Option("an expired memory is gone in memcluster; it cannot be shown", _falsy),
    "latest_only": Option("memcluster returns only the latest version of a memory (older versions are only "
                          "in its history)", lambda v: v is None or v is True),
    "custom_categories": Option("categories come from the app's extractor (memcluster topics); per-request "
                                "categories are not supported", lambda v: v is None),
    "custom_instructions": Option("extraction instructions are the app's extractor configuration, not a "
                                  "request parameter", lambda v: v is None),
    "agent_custom_instructions": Option("extraction instructions are the app's extractor configuration, not a "
                                        "request parameter", lambda v: v is None),
    "includes": Option("extraction hints are not supported", lambda v: v is None),
    "excludes": Option("extraction hints are not supported", lambda v: v is None),
    "structured_data_schema": Option("structured extraction is not supported", lambda v: v is None),
    "metadata": Option("a search's metadata conditions go in filters: {'metadata': {key: value}}"),
    "reference_date": Option("temporal reasoning (a reference date for relative queries) is not supported",
                             lambda v: v is None),
}
"""Mem0 parameters that memcluster does not apply: the values it accepts (it behaves so already)."""


PROJECT_IDS = ("org_id", "project_id")
"""Mem0's organization and project ids: the mem0ai 1.x client sends those ``/v1/ping/`` answered (the key's
app) with nearly every request, in the body or the query."""


def check_project(values: Mapping[str, Any], app: str) -> None:
    """Accept an ``org_id``/``project_id`` that names the key's app; refuse any other (422 naming it): a key
    selects one app, there is no other organization or project to reach."""
    for name in PROJECT_IDS:
        if name in values and values[name] != app:
            raise ValidationError(f"{name}={values[name]!r} is not this key's project: memcluster serves one "
                                  f"project per key, the app {app!r} (as /v1/ping/ answers)", field=name)


def check_options(extra: Mapping[str, Any] | None, allowed: tuple[str, ...], app: str, where: str = "") -> None:
    """Refuse (422 naming it) every parameter in ``extra`` that is not one of ``allowed`` :data:`OPTIONS` or
    whose value memcluster does not behave as; ``org_id``/``project_id`` must name ``app``
    (:func:`check_project`)."""
    check_project(extra or {}, app)
    for name, value in (extra or {}).items():
        if name in PROJECT_IDS:
            continue
        option = OPTIONS.get(name) if name in allowed else None
        if option is None:
            raise ValidationError(f"unknown parameter {name!r}{where}", field=name or "body")  # '' names nothing
        if option.accepts is None or not option.accepts(value):
            raise ValidationError(f"{name}={value!r} is not supported: {option.why}", field=name)


class Mem0AddRequest(BaseModel):
    """``POST /v3/memories/add/``: messages plus entity ids (top level or in ``filters``)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{
        "messages": [{"role": "user", "content": "I am vegetarian."}], "user_id": "alice", "agent_id": "chef",
        "metadata": {"source": "onboarding"}, "infer": False}]})

    messages: list[dict[str, Any]] | str = Field(description="Chat messages ({role, content}) or one string.")
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None
    filters: dict[str, Any] | None = Field(default=None, description="Entity ids, as plain equalities.")
    metadata: dict[str, Any] | None = None
    infer: bool = Field(default=True, description="true: extract through ingest; false: store messages as given.")
    expiration_date: Any = Field(default=None, description="YYYY-MM-DD (UTC): the last day the memories are "
                                 "visible; infer=false only (with infer=true it is refused, 422).")
    timestamp: Any = Field(default=None, description="When the memories were created (Unix seconds or "
                           "ISO-8601): their created_at (and updated_at) instead of now.")

    ADD_OPTIONS: ClassVar[tuple[str, ...]] = (
        "async_mode", "version", "output_format", "enable_graph", "immutable", "custom_categories",
        "custom_instructions", "agent_custom_instructions", "includes", "excludes", "structured_data_schema")

    def entities(self) -> dict[str, Any]:
        """The entity ids, top level or in ``filters`` (plain ids only; the same id in both places agrees)."""
        names = ("user_id", "agent_id", "run_id", "app_id")
        out: dict[str, Any] = {}
        for k, v in (self.filters or {}).items():
            if k not in names:
                raise ValidationError(f"an add's filters name entity ids only ({', '.join(names)})",
                                      field=f"filters.{k}")
            out[k] = v
        for k in names:
            given = getattr(self, k)
            if given is not None:
                if k in out and out[k] != given:
                    raise ValidationError(f"{k} differs from filters.{k}", field=k)
                out[k] = given
        return out

    def message_list(self) -> list[dict[str, str]]:
        raw = [{"role": "user", "content": self.messages}] if isinstance(self.messages, str) else self.messages
        if not raw:
            raise ValidationError("messages must not be empty", field="messages")
        if len(raw) > MAX_MESSAGES:
            raise ValidationError(f"more than {MAX_MESSAGES} messages", field="messages")
        out: list[dict[str, str]] = []
        for i, m in enumerate(raw):
            role, content = m.get("role", "user"), m.get("content")
            if role not in ROLES:
                raise ValidationError(f"role must be one of {', '.join(ROLES)}", field=f"messages.{i}.role")
            if not isinstance(content, str):
                raise ValidationError("content must be a string", field=f"messages.{i}.content")
            if len(content.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
                raise ValidationError(f"content is longer than {MAX_TEXT_BYTES} bytes", field=f"messages.{i}.content")
            try:
                encodable(content, "content")
            except ValueError as exc:
                raise ValidationError(str(exc), field=f"messages.{i}.content") from None
            out.append({"role": str(role), "content": content})
        return out


class Mem0SearchRequest(BaseModel):
    """``POST /v3/memories/search/``."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{
        "query": "What does Alice eat?", "filters": {"AND": [{"user_id": "alice"}, {"agent_id": "chef"}]},
        "top_k": 5}]})

    query: str = Field(min_length=1, max_length=MAX_TEXT_BYTES)
    filters: dict[str, Any] | None = Field(default=None, description="Mem0's v2 filters (serve_apps.mem0.filters); "
                                           "each alternative names a user_id (or '*').")
    top_k: int = Field(default=10, ge=1, le=1000)
    limit: int | None = Field(default=None, ge=1, le=1000, description="Mem0 open source's name of top_k.")
    threshold: float | None = Field(default=None, ge=0, le=1, description=(
        "Minimum score (the hit's relevance, clamped to 0..1) of a result."))
    categories: list[str] | None = Field(default=None, description="Only memories with one of these categories.")
    fields: list[str] | None = Field(default=None, description="Only these fields of each result (and id).")
    enable_graph: bool = Field(default=False, description=(
        "Also answer `relations`: the current knowledge-graph facts of the entities the query names, as Mem0's "
        "{source, relationship, destination}."))
    keyword_search: bool | None = Field(default=None, description="true or absent: hybrid (BM25 + dense); "
                                        "false: dense only.")

    SEARCH_OPTIONS: ClassVar[tuple[str, ...]] = (
        "rerank", "show_expired", "latest_only", "reference_date", "version", "output_format", "metadata")

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        return encodable(v, "query")


class Mem0ListRequest(BaseModel):
    """``POST /v3/memories/`` (``page`` and ``page_size`` are query parameters)."""

    model_config = ConfigDict(extra="allow")

    filters: dict[str, Any] | None = None
    start_date: Any = Field(default=None, description="Only memories created at or after this time (ISO-8601; "
                            "a date: its start).")
    end_date: Any = Field(default=None, description="Only memories created at or before this time (ISO-8601; "
                          "a date: through its end).")
    categories: list[str] | None = Field(default=None, description="Only memories with one of these categories.")

    LIST_OPTIONS: ClassVar[tuple[str, ...]] = ("show_expired", "latest_only", "enable_graph", "version",
                                               "output_format")


class Mem0UpdateRequest(BaseModel):
    """``PUT /v1/memories/{id}/``: new text, new metadata and/or a new ``expiration_date`` (null clears it)."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    metadata: dict[str, Any] | None = None
    expiration_date: Any = Field(default=None, description="YYYY-MM-DD (UTC): the last day the memory is "
                                 "visible; null: it never expires; left out: kept.")
    timestamp: Any = Field(default=None, description="When the memory was updated (Unix seconds or ISO-8601): "
                           "its updated_at instead of now.")


class Mem0BatchItem(BaseModel):
    """One memory of a batch: its id, and for an update its new ``text`` and/or ``metadata``."""

    model_config = ConfigDict(extra="forbid")

    memory_id: str
    text: str | None = None
    metadata: dict[str, Any] | None = None


class Mem0BatchRequest(BaseModel):
    """``PUT /v1/batch/`` (update) and ``DELETE /v1/batch/`` (delete): ``{"memories": [...]}``."""

    model_config = ConfigDict(extra="forbid")

    memories: list[Mem0BatchItem] = Field(min_length=1, max_length=MAX_BATCH)


FEEDBACK = ("POSITIVE", "NEGATIVE", "VERY_NEGATIVE")


class Mem0FeedbackRequest(BaseModel):
    """``POST /v1/feedback/``: kept on the memory (null clears it); memcluster does not learn from it."""

    model_config = ConfigDict(extra="forbid")

    memory_id: str
    feedback: str | None = None
    feedback_reason: str | None = Field(default=None, max_length=1024)

    @field_validator("feedback")
    @classmethod
    def _feedback(cls, v: str | None) -> str | None:
        if v is not None and v not in FEEDBACK:
            raise ValueError(f"feedback must be one of {', '.join(FEEDBACK)} or null")
        return v
