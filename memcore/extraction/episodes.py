"""The assistant-episode stage (optional, off by default): results the assistant gave become episodes.

Ordinary extraction keeps what the user said; a number or a title that only the assistant
said (the study "had 38 participants", the cartoon "Nu, pogodi!") is lost unless this stage
runs. It selects reusable user/assistant pairs from the delta (the user message and the final
assistant reply; tool messages, replies that carry tool calls and interactions the user asked
to forget are left out), asks the model in batches for one episode per useful pair and
validates each result against its source pair:

- it names a pair that was offered;
- its length is within :data:`MIN_CHARS` .. :data:`MAX_CHARS`;
- every number in it appears in the pair;
- it duplicates (word-set Jaccard >= 0.8) neither another result, an ordinary operation nor
  an existing entry.

Valid results are ``add`` operations of ``episode`` memories with ``source=assistant``, the
pair's event ids as provenance and the pair's time as event time. Invalid ones are dropped
and recorded. Any failure of the stage returns no episodes and an error string; the caller
keeps the ordinary operations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import openai
import pydantic
from pydantic import BaseModel, Field

from memcore.errors import MemoryServiceError
from memcore.extraction import prompts
from memcore.extraction.chat import AfterModel, BeforeModel, ChatClient, RawToolCall
from memcore.extraction.events import Event
from memcore.fields import now_utc, utc
from memcore.model import Entry, Kind, Memory, Operation, Source
from memcore.text import jaccard, numbers
from memcore.validation import first_error
from memcore.vocabulary import EPISODE_TOOL

MIN_CHARS = 20
MAX_CHARS = 1200
DUPLICATE_JACCARD = 0.8
MIN_REPLY_CHARS = 20
_FORGET_RE = re.compile(
    r"\b(forget|don'?t (remember|save|store|keep)|do not (remember|save|store|keep)|delete (this|that|it))\b",
    re.IGNORECASE,
)
_PAIR_RE = re.compile(r"^\s*\[?\s*P?\s*(\d{1,6})\s*\]?\s*$", re.IGNORECASE)


class EpisodeResult(BaseModel):
    operations: list[Operation] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    error: str | None = None
    """Why the stage failed (``"ExtractorError: extractor: ..."``); None when it ran."""
    pairs: int = 0
    """How many candidate pairs were offered to the model (0: the stage was skipped)."""


def candidate_pairs(delta: Sequence[Event], min_reply_chars: int = MIN_REPLY_CHARS) -> list[list[Event]]:
    """Reusable user/assistant interactions of the delta: ``[user, final assistant reply(s)]``."""
    pairs: list[list[Event]] = []
    current: list[Event] | None = None
    for e in delta:
        if not e.is_text:
            continue
        if e.role == "user":
            current = [e]
            pairs.append(current)
        elif current is not None and not e.tool_calls:
            current.append(e)
    keep = []
    for pair in pairs:
        replies = pair[1:]
        if not replies or _FORGET_RE.search(pair[0].text):
            continue
        if sum(len(r.text) for r in replies) < min_reply_chars:
            continue
        keep.append(pair)
    return keep


class AssistantEpisodeStage:
    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        before_model: BeforeModel | None = None,
        after_model: AfterModel | None = None,
        client: openai.OpenAI | None = None,
        temperature: float | None = 0.0,
        *,
        batch_size: int = 8,
        names: Mapping[str, str] | None = None,
        chat: ChatClient | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.chat = chat or ChatClient(base_url, model, api_key, timeout=timeout, temperature=temperature,
                                       before_model=before_model, after_model=after_model, client=client)
        self.batch_size = batch_size
        self.names = {"user": "User", "assistant": "Assistant", **(names or {})}

    def run(
        self,
        delta: Sequence[Event],
        existing: Sequence[Entry] = (),
        *,
        now: datetime | None = None,
        others: Sequence[Operation] = (),
    ) -> EpisodeResult:
        """Episodes for the delta's reusable pairs; never raises (a failure is ``error``)."""
        pairs = candidate_pairs(delta)
        if not pairs:
            return EpisodeResult()
        when = utc(now) if now is not None else now_utc()
        calls: list[RawToolCall] = []
        try:
            for start in range(0, len(pairs), self.batch_size):
                batch = pairs[start : start + self.batch_size]
                messages = [
                    {"role": "system", "content": prompts.EPISODE_SYSTEM.format(now=when.isoformat())},
                    {"role": "user", "content": prompts.episode_prompt(batch, self.names, start + 1)},
                ]
                _, got = self.chat.call(messages, [prompts.tool_schema(EPISODE_TOOL)])
                calls.extend(got)
        except MemoryServiceError as exc:
            return EpisodeResult(error=f"{type(exc).__name__}: {exc}", pairs=len(pairs))
        except Exception as exc:  # noqa: BLE001 - the optional stage must never break ordinary extraction
            return EpisodeResult(error=f"{type(exc).__name__}: {exc}", pairs=len(pairs))
        return self.validate(calls, pairs, existing, others)

    def validate(
        self,
        calls: Sequence[RawToolCall],
        pairs: Sequence[Sequence[Event]],
        existing: Sequence[Entry] = (),
        others: Sequence[Operation] = (),
    ) -> EpisodeResult:
        """Check each call against its source pair (pairs are numbered from 1 across batches); keep the valid ones."""
        seen = [e.text for e in existing] + [o.memory.text for o in others if o.memory is not None]
        ops: list[Operation] = []
        rejected: list[str] = []
        for i, call in enumerate(calls, 1):
            try:
                mem = self._episode(call, pairs, seen)
            except ValueError as exc:
                rejected.append(f"episode {i} (id {call.id}): {exc}")
                continue
            seen.append(mem.text)
            ops.append(Operation(type="add", memory=mem))
        return EpisodeResult(operations=ops, rejected=rejected, pairs=len(pairs))

    def _episode(self, call: RawToolCall, pairs: Sequence[Sequence[Event]], seen: Sequence[str]) -> Memory:
        if call.name != EPISODE_TOOL:
            raise ValueError(f"unknown tool {call.name!r}")
        try:
            args: Any = json.loads(call.arguments or "{}")
        except ValueError:
            raise ValueError("arguments are not valid JSON") from None
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
        n = args.get("pair")
        if isinstance(n, str) and (m := _PAIR_RE.match(n)):
            n = int(m.group(1))
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= len(pairs):
            raise ValueError(f"unknown pair {args.get('pair')!r}")
        pair = pairs[n - 1]
        text = args.get("memory")
        if not isinstance(text, str):
            raise ValueError("memory must be a string")
        text = " ".join(text.split())
        if not MIN_CHARS <= len(text) <= MAX_CHARS:
            raise ValueError(f"length {len(text)} is outside {MIN_CHARS}..{MAX_CHARS} characters")
        source_numbers = set(numbers(" ".join(e.text for e in pair)))
        missing = [x for x in numbers(text) if x not in source_numbers]
        if missing:
            raise ValueError(f"number(s) {', '.join(missing)} do not appear in pair {n}")
        for other in seen:
            if jaccard(text, other) >= DUPLICATE_JACCARD:
                raise ValueError(f"duplicates {other[:80]!r}")
        raw_topics = args.get("topics")
        topics: list[str] = raw_topics if isinstance(raw_topics, list) else []
        try:
            return Memory(text=text, topics=topics, kind=Kind.EPISODE, event_time=pair[0].timestamp,
                          source=Source.ASSISTANT, provenance=[e.id for e in pair])
        except pydantic.ValidationError as exc:
            raise ValueError(f"invalid memory: {first_error(exc.errors())[0]}") from None
