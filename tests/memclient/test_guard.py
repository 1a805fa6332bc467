"""memclient.guard, the "memory never blocks the model" rule: reads fall back, tool calls answer with the
error, writes are retried and kept in order, refused writes recorded; other exceptions still raise."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from memclient import AuthError, InvalidRequest, MemclientError, Retry, Unavailable, Unreachable
from memclient.guard import PendingWrites, read_or, retryable, safe_tool, tool_arguments, tool_result

FAST = Retry(attempts=3, backoff=0.0)


async def test_read_or_falls_back_on_memory_failures_only(caplog: pytest.LogCaptureFixture) -> None:
    async def down() -> str:
        raise Unreachable("connection refused")

    async def bug() -> str:
        raise KeyError("a bug is not a memory failure")

    with caplog.at_level(logging.WARNING, logger="memclient.guard"):
        assert await read_or("preload", down, "") == ""
    assert "memory read failed (preload)" in caplog.text and "connection refused" in caplog.text
    with pytest.raises(KeyError):
        await read_or("preload", bug, "")


async def test_tool_result_and_safe_tool_name_the_problem() -> None:
    async def refused() -> dict[str, Any]:
        raise InvalidRequest("memory text must not be empty", status=422, error="ValidationError", field="memory")

    assert await tool_result("memory_add", refused) == {
        "error": "ValidationError", "status": 422, "field": "memory", "message": "memory text must not be empty"}

    @safe_tool
    def search(query: str) -> list[str]:
        """Search memories."""
        raise AuthError("disabled tool", status=403)

    @safe_tool
    async def asearch(query: str) -> list[str]:
        raise Unavailable("store down", error="StoreError")

    assert search("x") == {"error": "AuthError", "status": 403, "field": None, "message": "disabled tool"}
    assert search.__name__ == "search" and search.__doc__ == "Search memories."
    assert (await asearch("x"))["error"] == "StoreError"


def test_tool_arguments() -> None:
    assert tool_arguments('{"q": 1}') == {"q": 1} and tool_arguments("  ") == {} and tool_arguments(None) == {}
    assert tool_arguments({"q": 2}) == {"q": 2}
    for raw in ("{nope", "[1, 2]", '"text"'):
        with pytest.raises(InvalidRequest) as info:
            tool_arguments(raw)
        assert info.value.field == "arguments"


def test_retryable() -> None:
    assert retryable(Unreachable("x"), FAST) and retryable(Unavailable("x"), FAST)
    assert retryable(MemclientError("x", status=502), FAST)
    assert not retryable(InvalidRequest("x", status=422), FAST) and not retryable(MemclientError("x"), FAST)


async def test_pending_writes_retry_keep_order_and_record_refusals(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[MemclientError] = []
    sent: list[str] = []
    tries: list[str] = []

    async def send(payload: str) -> None:
        tries.append(payload)
        if failures:
            raise failures.pop(0)
        sent.append(payload)

    writes: PendingWrites[str] = PendingWrites("test", send, FAST)
    failures[:] = [Unavailable("a"), Unavailable("b")]  # two failed tries, the third succeeds
    assert await writes.write("one") and sent == ["one"] and tries == ["one"] * 3
    failures[:] = [Unreachable("down")] * 3  # all three tries fail: kept
    with caplog.at_level(logging.WARNING, logger="memclient.guard"):
        assert not await writes.write("two")
    assert writes.pending == ["two"] and "1 kept for a later try" in caplog.text and tries.count("two") == 3
    failures[:] = [Unreachable("still down")] * 3  # a kept write gets one try per flush, not the backoff again
    assert not await writes.flush() and tries.count("two") == 4 and len(failures) == 2
    failures.clear()
    failures[:] = [InvalidRequest("bad", status=422)]  # the next write: "two" first (refused), then "three"
    assert await writes.write("three")
    assert sent == ["one", "three"] and writes.pending == []
    assert [(p, e.status) for p, e in writes.refused] == [("two", 422)]
    await writes.write("four")
    writes.pending = ["x", "y", "z"]
    writes.discard(lambda p: p != "y")
    writes.replace("z", "z2")
    writes.replace("x", None)
    assert writes.pending == ["z2"] and await writes.flush() and sent[-1] == "z2"
