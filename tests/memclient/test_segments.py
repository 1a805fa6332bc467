"""The URL rule (memclient.segments) and memclient's use of it: every id that travels in a path is checked
before anything is sent (sync and async), and every segment is percent-encoded so that it round-trips."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from memclient import AsyncMemoryClient, InvalidRequest, MemoryClient, Retry, Unavailable
from memclient.segments import check_segment, segment_problem

REFUSED = [".", "..", "", "/", "a/b", "%2e", "%2E", "%2e%2E", "%2E%2e", "%2f", "%2F", "a%2Fb", "%252e", "%252F",
           "%25252e%25252e", "..%2F.."]
KEPT = ["...", "a.b", ".a", "100%", "%", "%25", "%zz", "a b", "?&#", "café", "caf%C3%A9", "%5c", "\\"]


@pytest.mark.parametrize("value", REFUSED)
def test_ids_a_url_would_change_are_refused(value: str) -> None:
    assert segment_problem(value) is not None
    with pytest.raises(ValueError, match=r"^session must"):
        check_segment(value, "session")


@pytest.mark.parametrize("value", KEPT)
def test_every_other_id_round_trips(value: str) -> None:
    assert segment_problem(value) is None and check_segment(value, "session") == value


def test_the_message_shows_the_decoded_form() -> None:
    assert segment_problem("%2E%2e") == ("must not be '%2E%2e' (percent-decoded it is '..'): a URL drops '.' and "
                                         "climbs a level for '..'")
    assert "'/'" in str(segment_problem("a%2Fb"))


# --------------------------------------------------------------------------- memclient, before sending
APP, USER = "demo", "alice"
SyncCall = Callable[[MemoryClient, str], Any]
AsyncCall = Callable[[AsyncMemoryClient, str], Awaitable[Any]]
EVENTS = [{"id": "e1", "role": "user", "content": "hi"}]

#: (field, sync call with the bad value in that field, async call)
CALLS: list[tuple[str, SyncCall, AsyncCall]] = [
    ("app", lambda c, v: c.read(v, USER), lambda c, v: c.read(v, USER)),
    ("app", lambda c, v: c.tools(v), lambda c, v: c.tools(v)),
    ("user", lambda c, v: c.add(APP, v, "x"), lambda c, v: c.add(APP, v, "x")),
    ("user", lambda c, v: c.clear(APP, v), lambda c, v: c.clear(APP, v)),
    ("user", lambda c, v: c.forget(APP, v), lambda c, v: c.forget(APP, v)),
    ("user", lambda c, v: c.search(APP, v, "q"), lambda c, v: c.search(APP, v, "q")),
    ("user", lambda c, v: c.preload(APP, v, 3, "m"), lambda c, v: c.preload(APP, v, 3, "m")),
    ("user", lambda c, v: c.recall(APP, v, "q"), lambda c, v: c.recall(APP, v, "q")),
    ("memory_id", lambda c, v: c.get(APP, USER, v), lambda c, v: c.get(APP, USER, v)),
    ("memory_id", lambda c, v: c.update(APP, USER, v, "t"), lambda c, v: c.update(APP, USER, v, "t")),
    ("memory_id", lambda c, v: c.delete(APP, USER, v), lambda c, v: c.delete(APP, USER, v)),
    ("session", lambda c, v: c.delete_session(APP, USER, v), lambda c, v: c.delete_session(APP, USER, v)),
    ("session", lambda c, v: c.delete_turn(APP, USER, v, "e1"), lambda c, v: c.delete_turn(APP, USER, v, "e1")),
    ("session", lambda c, v: c.ingest(APP, USER, v, EVENTS), lambda c, v: c.ingest(APP, USER, v, EVENTS)),
    ("event_id", lambda c, v: c.delete_turn(APP, USER, "s1", v), lambda c, v: c.delete_turn(APP, USER, "s1", v)),
    ("job_id", lambda c, v: c.job(v), lambda c, v: c.job(v)),
    ("name", lambda c, v: c.call_tool(APP, USER, v, {}), lambda c, v: c.call_tool(APP, USER, v, {})),
]


class Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.raw_path.decode("ascii"))
        return httpx.Response(503)


@pytest.mark.parametrize("bad", [".", "..", "", "a/b", "%2E%2e", "%2f"])
@pytest.mark.parametrize(("field", "call", "_"), CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CALLS)])
def test_sync_client_refuses_before_sending(field: str, call: SyncCall, _: AsyncCall, bad: str) -> None:
    seen = Recorder()
    with MemoryClient(transport=httpx.MockTransport(seen), retry=Retry.never()) as mc:
        with pytest.raises(InvalidRequest) as err:
            call(mc, bad)
    assert (err.value.field, err.value.error, err.value.status) == (field, "ValidationError", None)
    assert seen.paths == []


@pytest.mark.parametrize("bad", [".", "..", "", "a/b", "%2E%2e", "%2f"])
@pytest.mark.parametrize(("field", "_", "call"), CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CALLS)])
async def test_async_client_refuses_before_sending(field: str, _: SyncCall, call: AsyncCall, bad: str) -> None:
    seen = Recorder()
    async with AsyncMemoryClient(transport=httpx.MockTransport(seen), retry=Retry.never()) as mc:
        with pytest.raises(InvalidRequest) as err:
            await call(mc, bad)
    assert (err.value.field, err.value.error, err.value.status) == (field, "ValidationError", None)
    assert seen.paths == []


def test_every_segment_is_percent_encoded() -> None:
    """Whatever an id holds, it arrives as one segment that decodes (once) to itself."""
    seen = Recorder()
    odd = ["a?b#c", "100%", "%25", "caf\u00e9 \u00fc", "...", "x;y=z", "\\", "[::1]"]
    with MemoryClient(transport=httpx.MockTransport(seen), retry=Retry.never()) as mc:
        for value in odd:
            with pytest.raises(Unavailable):  # the recorder answers 503: only the path matters
                mc.delete_turn(value, "u", value, value)
    for value, path in zip(odd, seen.paths, strict=True):
        parts = path.split("/")
        assert len(parts) == 10, path
        assert [unquote(parts[i]) for i in (3, 7, 9)] == [value, value, value]
