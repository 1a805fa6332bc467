"""Request bodies of the Mem0-compatible API (:mod:`serve_apps.mem0.api`), as ``mem0ai``'s client sends them.

Fields the client may send that memcluster does not use (``custom_categories``, ``rerank``,
``fields``, ``async_mode``, ...) are accepted and ignored; ``add`` always runs synchronously.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memcore.errors import ValidationError
from memcore.fields import MAX_TEXT_BYTES, encodable

MAX_MESSAGES = 100
ROLES = ("user", "assistant", "system")


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

    def entities(self) -> dict[str, Any]:
        out = {k: v for k, v in (self.filters or {}).items() if k in ("user_id", "agent_id", "run_id", "app_id")}
        for k in ("user_id", "agent_id", "run_id", "app_id"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
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
    filters: dict[str, Any] | None = Field(default=None, description="Equalities on user_id, agent_id, run_id, "
                                           "app_id, metadata; AND / OR; each alternative names a user_id.")
    top_k: int = Field(default=10, ge=1, le=1000)
    threshold: float | None = Field(default=None, ge=-1, le=1, description=(
        "Minimum relevance (query/memory cosine, -1..1) of a result, hybrid search included."))

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        return encodable(v, "query")


class Mem0ListRequest(BaseModel):
    """``POST /v3/memories/`` (``page`` and ``page_size`` are query parameters)."""

    model_config = ConfigDict(extra="allow")

    filters: dict[str, Any] | None = None


class Mem0UpdateRequest(BaseModel):
    """``PUT /v1/memories/{id}/``: new text, new metadata and/or a new ``expiration_date`` (null clears it)."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    metadata: dict[str, Any] | None = None
    expiration_date: Any = Field(default=None, description="YYYY-MM-DD (UTC): the last day the memory is "
                                 "visible; null: it never expires; left out: kept.")
