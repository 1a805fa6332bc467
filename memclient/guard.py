"""Memory never blocks the model: the one rule of every framework adapter, in one place.

- A read for the model (the preload block, the tool list, a search the framework makes for the prompt)
  that fails gives the model no memory: :func:`read_or` (:func:`read_or_sync`) logs a warning and
  returns the fallback.
- A tool call that fails (a bad argument from the model, a 4xx, a 5xx, no answer) is a result the model
  can read: :func:`tool_result` / :func:`safe_tool` return :func:`tool_error`'s JSON object
  ``{"error", "status", "field", "message"}`` instead of raising out of the run.
- A write (session turns to ingest, a post-turn store) that fails is tried again and then kept:
  :class:`PendingWrites` tries each write ``retry.attempts`` times with the retry policy's backoff
  (:mod:`memclient.retry`: on no answer and on 500/502/503/504); one still failing is logged and stays
  pending, and the next write (or ``flush``, on close) sends it first, in order, with one try (so
  while memory stays down a turn waits for one failed call at most, not for the whole backoff again).
  A write the service refuses (another 4xx: it would fail again) is logged and kept in ``refused``,
  never raised.

A memory failure is a :class:`memclient.MemclientError` (every error answer, no answer at all, a
timeout: the clients raise nothing else for them). Anything else is a bug of the caller or of the
adapter and raises as usual.

Storage APIs keep raising: a LangGraph ``BaseStore`` ``get``/``put`` answering "nothing there" or
"stored" when it was not would lose data (a later ``put`` overwrites what the failed ``get`` hid). What
is built on such an API for the model follows the rule: a node's memory read goes through
:func:`read_or_sync`, a tool through :func:`safe_tool` (``examples/langgraph_memory.py``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar, cast

from memclient.errors import InvalidRequest, MemclientError, Unavailable, Unreachable
from memclient.retry import Retry

logger = logging.getLogger("memclient.guard")

T = TypeVar("T")
W = TypeVar("W")
F = TypeVar("F", bound=Callable[..., Any])


def tool_error(tool: str, exc: MemclientError) -> dict[str, Any]:
    """The tool result of a failed call (logged as a warning): the problem named, for the model to read."""
    logger.warning("memory tool %s failed; the model gets the error: %s", tool, exc)
    return {"error": exc.error or type(exc).__name__, "status": exc.status, "field": exc.field,
            "message": exc.message}


def tool_arguments(raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool call's arguments as an object; arguments that are not a JSON object are an
    :class:`InvalidRequest` naming ``arguments`` (the model sent them: it gets the error back)."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the tool arguments are not JSON: {exc.msg} at {exc.pos}", error="ValidationError",
                             field="arguments") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"the tool arguments must be a JSON object, got {type(value).__name__}",
                             error="ValidationError", field="arguments")
    return value


async def tool_result(tool: str, call: Callable[[], Awaitable[T]]) -> T | dict[str, Any]:
    """``await call()``, or :func:`tool_error` when memory fails."""
    try:
        return await call()
    except MemclientError as exc:
        return tool_error(tool, exc)


def safe_tool(fn: F) -> F:
    """A tool function (sync or async) whose memory failures return :func:`tool_error` instead of raising
    (for tools written on a storage API, e.g. a LangGraph store; the signature and docstring are kept, so
    ``@tool`` decorators read them as before)."""
    name = getattr(fn, "__name__", "tool")
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await tool_result(name, lambda: fn(*args, **kwargs))

        return cast(F, run_async)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemclientError as exc:
            return tool_error(name, exc)

    return cast(F, run)


async def read_or(what: str, read: Callable[[], Awaitable[T]], fallback: T) -> T:
    """``await read()``, or ``fallback`` (no memory) with a warning when memory fails."""
    try:
        return await read()
    except MemclientError as exc:
        logger.warning("memory read failed (%s); the model goes on without it: %s", what, exc)
        return fallback


def read_or_sync(what: str, read: Callable[[], T], fallback: T) -> T:
    """:func:`read_or` for a blocking read (a sync client, a LangGraph node's ``store.search``)."""
    try:
        return read()
    except MemclientError as exc:
        logger.warning("memory read failed (%s); the model goes on without it: %s", what, exc)
        return fallback


def retryable(exc: MemclientError, retry: Retry) -> bool:
    """Worth another try later: no answer, or a status the retry policy retries (a 4xx is not)."""
    if isinstance(exc, Unreachable | Unavailable):
        return True
    return exc.status is not None and retry.status_retryable(exc.status)


class PendingWrites(Generic[W]):
    """Writes to memory, oldest first, sent by ``send``; what memory has not taken yet stays here.

    Safe to use from several event loops and threads: the lists are guarded by a lock. Two flushes at
    once may send the same pending write twice, so ``send`` must be idempotent (ingest with event ids
    is: the server recognises a turn by its id).
    """

    def __init__(self, what: str, send: Callable[[W], Awaitable[object]], retry: Retry | None = None) -> None:
        self.what, self.send, self.retry = what, send, retry if retry is not None else Retry()
        self.pending: list[W] = []
        """Writes not taken yet (memory down), oldest first; the next write or flush sends them first."""
        self.refused: list[tuple[W, MemclientError]] = []
        """Writes the service refused (a 4xx other than a retryable status), with the error; not resent."""
        self._lock = threading.Lock()
        self._kept: set[int] = set()  # ids of the pending writes that failed already: one try per flush

    def __len__(self) -> int:
        return len(self.pending)

    async def write(self, payload: W) -> bool:
        """Queue ``payload`` behind the pending writes and send them all; True when nothing is left pending."""
        with self._lock:
            self.pending.append(payload)
        return await self.flush()

    def discard(self, keep: Callable[[W], bool]) -> None:
        """Drop the pending writes for which ``keep`` is false (e.g. turns the session removed before they
        were sent)."""
        with self._lock:
            self.pending = [p for p in self.pending if keep(p)]
            self._kept &= {id(p) for p in self.pending}

    def replace(self, old: W, new: W | None) -> None:
        """Put ``new`` in the place of the pending write ``old`` (None: drop it)."""
        with self._lock:
            if new is None:
                self.pending = [p for p in self.pending if p is not old]
            else:
                self.pending = [new if p is old else p for p in self.pending]
            self._kept &= {id(p) for p in self.pending}

    async def flush(self) -> bool:
        """Send the pending writes in order; True when all were taken (or refused), False when memory
        still fails (what is left stays pending, logged)."""
        while True:
            with self._lock:
                if not self.pending:
                    return True
                payload = self.pending[0]
                attempts = 1 if id(payload) in self._kept else self.retry.attempts
            try:
                await self._send_retrying(payload, attempts)
            except MemclientError as exc:
                if retryable(exc, self.retry):
                    with self._lock:
                        self._kept.add(id(payload))
                    logger.warning("memory write failed (%s); %d kept for a later try: %s", self.what,
                                   len(self.pending), exc)
                    return False
                logger.error("memory refused a write (%s); it is kept in refused, not resent: %s", self.what, exc)
                with self._lock:
                    self.refused.append((payload, exc))
            with self._lock:
                self.pending = [p for p in self.pending if p is not payload]
                self._kept.discard(id(payload))

    async def _send_retrying(self, payload: W, attempts: int) -> None:
        tried = 0
        while True:
            tried += 1
            try:
                await self.send(payload)
                return
            except MemclientError as exc:
                if tried >= attempts or not retryable(exc, self.retry):
                    raise
                await asyncio.sleep(self.retry.delay(tried, getattr(exc, "retry_after", None)))
