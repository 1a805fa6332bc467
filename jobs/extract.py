"""The extraction stages of the backfill job: archive rows → units (events, memories, errors).

A *unit row* is one of (``kind``):

- ``events``: the events of one chunk of a session (the writer archives them; a session is
  written only when all its ``n_chunks`` chunks arrived and none failed);
- ``memory``: one extracted memory (``payload`` the Memory JSON, ``text`` what gets embedded);
- ``error``: a chunk whose extraction failed (``payload`` says why); its session is skipped whole.

Verbatim extraction (no ``extractor.base_url``) runs in plain ``map_batches`` tasks over whole
sessions (the granularity needs them whole). With a base URL the sessions are cut into chunks
of :data:`LLM_CHUNK_EVENTS` turns and sent as batched chat completions through
``ray.data.llm``'s HTTP request processor (no vLLM needed); the model sees no existing
memories (the calls are independent) and may only add (``memory_add``). Deterministic code
turns its tool calls into memories exactly as the live extractor does, citing each turn as
``<session>/<event_id>`` (:func:`memcore.provenance.cite`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from memcore.extraction import prompts
from memcore.extraction.chat import RawToolCall
from memcore.extraction.events import Event
from memcore.extraction.llm import CHUNK_EVENTS, LLMExtractor
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.fields import MAX_PROVENANCE, utc
from memcore.provenance import cite
from memcore.settings import ExtractorSettings
from memcore.vocabulary import ADD, DEFAULT_NAMES, Granularity

LLM_CHUNK_EVENTS = CHUNK_EVENTS
SESSION_SCHEMA = pa.schema([
    ("app", pa.string()), ("user", pa.string()), ("session", pa.string()), ("first_ts", pa.float64()),
    ("turns", pa.int64()), ("events", pa.string()), ("names", pa.string()),
])
UNIT_SCHEMA = pa.schema([
    ("app", pa.string()), ("user", pa.string()), ("session", pa.string()), ("first_ts", pa.float64()),
    ("kind", pa.string()), ("chunk", pa.int64()), ("n_chunks", pa.int64()), ("pos", pa.int64()),
    ("payload", pa.string()), ("text", pa.string()),
])


def _events(raw: str) -> list[Event]:
    return [Event.model_validate(e) for e in json.loads(raw)]


def _names(raw: str | None) -> dict[str, str]:
    return dict(json.loads(raw)) if raw else {}


def _unit(row: dict[str, Any], kind: str, chunk: int, n_chunks: int, pos: int, payload: str,
          text: str = "") -> dict[str, Any]:
    return {"app": row["app"], "user": row["user"], "session": row["session"], "first_ts": row["first_ts"],
            "kind": kind, "chunk": chunk, "n_chunks": n_chunks, "pos": pos, "payload": payload, "text": text}


class VerbatimStage:
    """``map_batches`` function: whole sessions → an ``events`` unit plus one ``memory`` unit per entry."""

    def __init__(self, granularity: Granularity, window: int = 1) -> None:
        self.granularity = granularity
        self.window = window

    def __call__(self, batch: pa.Table) -> pa.Table:
        out: list[dict[str, Any]] = []
        for row in batch.to_pylist():
            events = _events(row["events"])
            extractor = VerbatimExtractor(self.granularity, _names(row["names"]), window=self.window)
            out.append(_unit(row, "events", 0, 1, -1, row["events"]))
            try:
                ops = cite(row["session"], extractor.extract(events).operations)
            except Exception as exc:  # noqa: BLE001 - one bad session must not stop the job
                out.append(_unit(row, "error", 0, 1, -1, f"verbatim extraction failed: {type(exc).__name__}: {exc}"))
                continue
            for pos, op in enumerate(ops):
                if op.memory is not None:
                    out.append(_unit(row, "memory", 0, 1, pos, op.memory.model_dump_json(), op.memory.text))
        return pa.Table.from_pylist(out, schema=UNIT_SCHEMA)


def chunk_sessions(batch: pa.Table) -> pa.Table:
    """``map_batches`` function: sessions → chunk rows of at most :data:`LLM_CHUNK_EVENTS` text turns
    (sessions without text turns are dropped by validation before)."""
    out: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        events = json.loads(row["events"])
        texts = [e for e in events if e.get("role") in ("user", "assistant") and str(e.get("content", "")).strip()]
        pieces = [texts[i:i + LLM_CHUNK_EVENTS] for i in range(0, len(texts), LLM_CHUNK_EVENTS)]
        rest = [e for e in events if e not in texts]  # tool messages: archived with the first chunk only
        for i, piece in enumerate(pieces):
            out.append({**row, "chunk": i, "n_chunks": len(pieces),
                        "events": json.dumps((rest if i == 0 else []) + piece, ensure_ascii=False),
                        "delta": json.dumps(piece, ensure_ascii=False)})
    return pa.Table.from_pylist(out)


class LLMRequests:
    """Builds the chat request of a chunk and parses its answer into units (pre/postprocess of the processor)."""

    def __init__(self, cfg: ExtractorSettings) -> None:
        if not cfg.model:
            raise ValueError("an extractor base_url needs extractor.model")
        self.cfg = cfg
        self.model = cfg.model
        self._extractor: LLMExtractor | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg, "model": self.model, "_extractor": None}  # the client is built where it is used

    @property
    def extractor(self) -> LLMExtractor:
        """Prompt building and answer parsing of the live extractor (its own client is never called)."""
        if self._extractor is None:
            self._extractor = LLMExtractor(self.cfg.base_url, self.model, "unused", policy=self.cfg.policy,
                                           tools=(ADD,))
        return self._extractor

    def preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        delta = _events(row["delta"])
        now = max((e.timestamp for e in delta), default=datetime.fromtimestamp(row["first_ts"], UTC))
        self.extractor.names = {**DEFAULT_NAMES, **_names(row.get("names"))}
        messages = self.extractor.messages(delta, [], utc(now))
        payload = {"model": self.model, "messages": messages, "tools": [prompts.tool_schema(ADD)],
                   "tool_choice": "auto", "temperature": 0.0}
        return {**row, "payload": payload}

    def postprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        delta = _events(row["delta"])
        out = {k: row[k] for k in ("app", "user", "session", "first_ts", "chunk", "n_chunks", "events")}
        try:
            calls = _tool_calls(row.get("http_response"))
            result = self.extractor.parse(calls, [], [e.id for e in delta][-MAX_PROVENANCE:])
        except ValueError as exc:
            return {**out, "memories": "[]", "error": str(exc)}
        mems = [op.memory.model_dump(mode="json") for op in cite(row["session"], result.operations)
                if op.memory is not None]
        return {**out, "memories": json.dumps(mems, ensure_ascii=False), "error": ""}


def _tool_calls(response: Any) -> list[RawToolCall]:
    if not isinstance(response, dict) or not response.get("choices"):
        detail = json.dumps(response)[:300] if response is not None else "no response"
        raise ValueError(f"the extraction model sent no choices: {detail}")
    message = response["choices"][0].get("message") or {}
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        calls.append(RawToolCall(id=str(call.get("id") or f"call_{i + 1}"), name=str(fn.get("name") or ""),
                                 arguments=str(fn.get("arguments") or "")))
    return calls


def llm_units(batch: pa.Table) -> pa.Table:
    """``map_batches`` function: parsed LLM answers → units."""
    out: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        chunk, n = int(row["chunk"]), int(row["n_chunks"])
        out.append(_unit(row, "events", chunk, n, -1, row["events"]))
        if row["error"]:
            out.append(_unit(row, "error", chunk, n, -1, f"LLM extraction failed: {row['error']}"))
            continue
        for pos, mem in enumerate(json.loads(row["memories"])):
            out.append(_unit(row, "memory", chunk, n, chunk * 100_000 + pos, json.dumps(mem), str(mem["text"])))
    return pa.Table.from_pylist(out, schema=UNIT_SCHEMA)


def llm_processor(cfg: ExtractorSettings, concurrency: int, batch_size: int = 16) -> Callable[[Any], Any]:
    """The ``ray.data.llm`` HTTP processor that extracts chunk rows (a Dataset → Dataset callable)."""
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    if not cfg.base_url:
        raise ValueError("extractor.base_url is required for LLM extraction")
    requests = LLMRequests(cfg)
    headers = {"Authorization": f"Bearer {cfg.api_key.get_secret_value()}"} if cfg.api_key else {}
    config = HttpRequestProcessorConfig(url=cfg.base_url.rstrip("/") + "/chat/completions", headers=headers,
                                        concurrency=concurrency, batch_size=batch_size, max_retries=2)
    processor = build_processor(config, preprocess=requests.preprocess, postprocess=requests.postprocess)
    return processor
