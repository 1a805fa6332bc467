"""The LLM extractor: one tool-calling chat completion over an OpenAI-compatible endpoint.

The model sees the existing memories with small integer ids and the new conversation, and
answers with memory_add / memory_update / memory_delete / memory_clear calls (and, when offered, the
knowledge-graph calls fact_add / fact_supersede / fact_invalidate, proposed as fact operations). Each call is
parsed on its own: a malformed one (bad JSON, unknown tool, unknown small id, invalid memory)
is rejected with a reason and the others are kept. API errors and timeouts raise
:class:`memcore.errors.ExtractorError` (the caller keeps its cursor for a retry).

An update that leaves out metadata (kind, event time, participants, location, topics) keeps
the target's, so "update the text" never turns an episode into a fact by omission.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import openai

from memcore.errors import ValidationError
from memcore.extraction import prompts
from memcore.extraction.chat import AfterModel, BeforeModel, ChatClient, RawToolCall
from memcore.extraction.events import Event, ExtractionResult
from memcore.fields import MAX_PROVENANCE, now_utc, utc
from memcore.graph import FactOperation
from memcore.model import Entry, Memory, Operation
from memcore.tools import memory_from_args
from memcore.vocabulary import (
    ADD,
    CLEAR,
    DEFAULT_NAMES,
    DEFAULT_POLICY,
    DELETE,
    EXTRACTION_TOOLS,
    FACT_OPERATIONS,
    FACT_TOOLS,
    POLICIES,
    PolicyName,
)

CHUNK_EVENTS = 64
"""The most turns of a session one extraction call sees (a longer session is extracted in pieces)."""
_SMALL_ID_RE = re.compile(r"^\s*\[?\s*(\d{1,6})\s*\]?\s*$")


class Rejected(Exception):
    """A tool call that cannot become an operation (the message says why)."""


class LLMExtractor:
    """The model extractor; its ``default_policy`` is the policy its prompt is written for."""

    uses_existing = True
    max_events: int | None = CHUNK_EVENTS

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        policy: PolicyName = DEFAULT_POLICY,
        timeout: float = 30.0,
        before_model: BeforeModel | None = None,
        after_model: AfterModel | None = None,
        client: openai.OpenAI | None = None,
        temperature: float | None = 0.0,
        *,
        tools: Sequence[str] = EXTRACTION_TOOLS,
        names: Mapping[str, str] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        unknown = [t for t in tools if t not in EXTRACTION_TOOLS + FACT_TOOLS]
        if unknown or not tools:
            raise ValueError(f"tools must be a non-empty subset of {EXTRACTION_TOOLS + FACT_TOOLS}, got {list(tools)}")
        self.policy: PolicyName = policy
        self.tools = tuple(tools)
        self.names = {**DEFAULT_NAMES, **(names or {})}
        self.chat = ChatClient(base_url, model, api_key, timeout=timeout, temperature=temperature,
                               before_model=before_model, after_model=after_model, client=client)

    @property
    def default_policy(self) -> PolicyName:
        return self.policy

    def messages(self, delta: Sequence[Event], existing: Sequence[Entry], now: datetime) -> list[dict[str, Any]]:
        """The chat messages of one extraction request."""
        return [
            {"role": "system", "content": prompts.system_prompt(self.policy, now, self.tools)},
            {"role": "user", "content": prompts.user_prompt(delta, existing, self.names)},
        ]

    def extract(
        self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None
    ) -> ExtractionResult:
        """Propose operations for ``delta`` given ``existing`` entries (one model call)."""
        shown = list({e.id: e for e in existing}.values())
        when = utc(now) if now is not None else now_utc()
        _, calls = self.chat.call(self.messages(delta, shown, when), [prompts.tool_schema(t) for t in self.tools])
        provenance = [e.id for e in delta][-MAX_PROVENANCE:]
        return self.parse(calls, shown, provenance)

    def parse(
        self, calls: Sequence[RawToolCall], shown: Sequence[Entry], provenance: Sequence[str]
    ) -> ExtractionResult:
        """Turn tool calls into operations; ``shown[n-1]`` is the entry the model knows as ``[n]``."""
        ops: list[Operation] = []
        facts: list[FactOperation] = []
        rejected: list[str] = []
        for i, call in enumerate(calls, 1):
            try:
                if call.name in FACT_TOOLS and call.name in self.tools:
                    facts.append(FactOperation(type=FACT_OPERATIONS[call.name], fact=_arguments(call.arguments),
                                               turns=list(provenance)))
                else:
                    ops.append(self._operation(call, shown, provenance))
            except Rejected as exc:
                rejected.append(f"tool call {i} ({call.name or '?'}, id {call.id}): {exc}")
        return ExtractionResult(operations=ops, rejected=rejected, facts=facts)

    def _operation(self, call: RawToolCall, shown: Sequence[Entry], provenance: Sequence[str]) -> Operation:
        if call.name not in self.tools:
            raise Rejected(f"unknown tool {call.name!r}")
        args = _arguments(call.arguments)
        if call.name == CLEAR:
            return Operation(type="clear")
        if call.name == ADD:
            return Operation(type="add", memory=_memory(args, provenance))
        target = _resolve(args.get("memory_id"), shown)
        if call.name == DELETE:
            return Operation(type="delete", memory_id=target.id)
        base: dict[str, Any] = {"topics": target.topics, "memory_kind": target.kind.value,
                                "event_time": target.event_time, "participants": target.participants,
                                "location": target.location}
        merged = {**base, **{k: v for k, v in args.items() if v is not None}}
        return Operation(type="update", memory=_memory(merged, provenance), memory_id=target.id)


def _arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise Rejected(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(args, dict):
        raise Rejected("arguments must be a JSON object")
    return args


def _memory(args: Mapping[str, Any], provenance: Sequence[str]) -> Memory:
    text = args.get("memory")
    if not isinstance(text, str):
        raise Rejected("memory must be a string")
    try:
        mem = memory_from_args(args)
    except ValidationError as exc:
        raise Rejected(f"invalid memory: {exc}") from None
    return mem.model_copy(update={"provenance": list(provenance)})


def _resolve(value: Any, shown: Sequence[Entry]) -> Entry:
    """The entry behind a small id (``3``, ``"3"`` or ``"[3]"``)."""
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and (m := _SMALL_ID_RE.match(value)):
        n = int(m.group(1))
    if value is None:
        raise Rejected("memory_id is required")
    if n is None or not 1 <= n <= len(shown):
        raise Rejected(f"unknown memory_id {value!r} (existing memories are numbered 1..{len(shown)})")
    return shown[n - 1]
