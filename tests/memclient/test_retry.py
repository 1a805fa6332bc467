"""memclient retries idempotent calls on no answer and on 5xx, with backoff and Retry-After:
the schedule against httpx.MockTransport, and a real server behind a proxy that drops one
answer after the server has done the work (what a crashed ingress replica does)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from memclient import AsyncMemoryClient, MemclientError, MemoryClient, NotFound, Retry, Unavailable, Unreachable
from tests.serve_apps.conftest import serve_local

APP, KEY = "app-r", "key-r"
ENTRY = {"id": "m1", "app": APP, "user": "u", "text": "x", "topics": [], "kind": "fact", "event_time": None,
         "participants": [], "location": None, "source": "user", "provenance": [], "metadata": {},
         "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z", "deleted_at": None}


class Script:
    """Answers with the scripted responses in turn (an exception is raised as a transport error)
    and records when each request came."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[], httpx.Response]) -> None:
        self.answers = list(answers)
        self.times: list[float] = []
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.times.append(time.monotonic())
        self.paths.append(f"{request.method} {request.url.path}")
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


def _status(code: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after else {}
    return httpx.Response(code, headers=headers, json={"error": "StoreError", "field": None, "message": "down"})


def test_delay_schedule_is_bounded() -> None:
    r = Retry(attempts=5, backoff=0.5, multiplier=2.0, max_delay=3.0)
    assert [r.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert r.delay(1, retry_after=2.5) == 2.5 and r.delay(1, retry_after=60) == 3.0
    with pytest.raises(ValueError):
        Retry(attempts=0)


def test_idempotent_call_retries_5xx_with_backoff_and_retry_after() -> None:
    script = Script(_status(503, "0.3"), _status(502), httpx.ConnectError("refused"),
                    httpx.Response(200, json={"hits": []}))
    retry = Retry(attempts=4, backoff=0.05, multiplier=2.0, max_delay=1.0)
    with MemoryClient(api_key=KEY, transport=httpx.MockTransport(script), retry=retry) as mc:
        assert mc.search(APP, "u", "q") == []
    assert len(script.times) == 4
    expected = [0.3, 0.1, 0.2]  # Retry-After, then backoff * 2 ** (n - 1) for tries 2 and 3
    for gap, want in zip(script.gaps(), expected, strict=True):
        assert want <= gap < want + 0.5


def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    script = Script(lambda: httpx.Response(500, text="Internal Server Error"))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(attempts=3, backoff=0.01)) as mc:
        with pytest.raises(MemclientError) as err:
            mc.read(APP, "u")
    assert err.value.status == 500 and len(script.times) == 3
    script = Script(_status(503, "7"))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(attempts=2, max_delay=0.05)) as mc:
        with pytest.raises(Unavailable) as unavailable:
            mc.get(APP, "u", "m1")
    assert unavailable.value.retry_after == 7.0 and len(script.times) == 2  # waited max_delay, not 7 s
    assert script.gaps()[0] < 1.0


def test_transport_errors_are_retried_then_unreachable() -> None:
    script = Script(httpx.ReadError("connection reset"), httpx.Response(201, json=ENTRY))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(backoff=0.01)) as mc:
        assert mc.add(APP, "u", "x").id == "m1"
    assert len(script.times) == 2
    script = Script(httpx.ConnectError("refused"))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(attempts=3, backoff=0.01)) as mc:
        with pytest.raises(Unreachable):
            mc.healthz()
    assert len(script.times) == 3


def test_non_idempotent_calls_and_4xx_are_sent_once() -> None:
    script = Script(_status(503, "0"))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(backoff=0.01)) as mc:
        with pytest.raises(Unavailable):
            mc.update(APP, "u", "m1", "new text")
        with pytest.raises(Unavailable):
            mc.call_tool(APP, "u", "memory_add", {"memory": "x"})
        with pytest.raises(Unavailable):
            mc.ingest(APP, "u", "s", [{"id": "e1", "role": "user", "content": "hi"}])
    assert len(script.times) == 3
    script = Script(httpx.Response(404, json={"error": "NotFoundError", "field": "memory_id", "message": "gone"}))
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(backoff=0.01)) as mc:
        with pytest.raises(NotFound):
            mc.get(APP, "u", "m1")
        with pytest.raises(NotFound):  # a first try's 404 is an answer, not a lost delete
            mc.delete(APP, "u", "m1")
    assert len(script.times) == 2


def test_retried_delete_that_finds_the_memory_gone_is_done() -> None:
    gone = httpx.Response(404, json={"error": "NotFoundError", "field": "memory_id", "message": "gone"})
    script = Script(httpx.RemoteProtocolError("server disconnected"), gone)
    with MemoryClient(transport=httpx.MockTransport(script), retry=Retry(backoff=0.01)) as mc:
        assert mc.delete(APP, "u", "m1") is None
    assert script.paths == ["DELETE /v1/apps/app-r/users/u/memories/m1"] * 2


async def test_async_client_retries_the_same_way() -> None:
    script = Script(_status(504), httpx.ConnectError("refused"), httpx.Response(200, json={"status": "ok"}))
    retry = Retry(attempts=3, backoff=0.05, multiplier=3.0)
    async with AsyncMemoryClient(transport=httpx.MockTransport(script), retry=retry) as mc:
        assert await mc.healthz() == {"status": "ok"}
    for gap, want in zip(script.gaps(), [0.05, 0.15], strict=True):
        assert want <= gap < want + 0.5
    script = Script(_status(503))
    async with AsyncMemoryClient(transport=httpx.MockTransport(script), retry=Retry.never()) as mc:
        with pytest.raises(Unavailable):
            await mc.readyz()
    assert len(script.times) == 1


# ------------------------------------------------------------------ a real server, one answer dropped
class _DropProxy(socketserver.ThreadingTCPServer):
    """Forwards each HTTP request to ``upstream`` and relays the answer, except that the next
    ``drops`` requests are forwarded and then their connection is closed without an answer."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _DropHandler)
        self.upstream = httpx.Client(base_url=upstream)
        self.drops = 0
        self.seen: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _DropHandler(socketserver.BaseRequestHandler):
    server: _DropProxy

    def handle(self) -> None:
        sock: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        first, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = first.split(" ", 2)
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines if line)}
        while len(body) < int(headers.get("content-length", "0")):
            body += sock.recv(65536)
        keep = {k: v for k, v in headers.items() if k in ("authorization", "content-type", "accept")}
        answer = self.server.upstream.request(method, target, headers=keep, content=body)
        self.server.seen.append(f"{method} {target}")
        if self.server.drops > 0:
            self.server.drops -= 1
            sock.close()  # the work is done upstream; the client gets no answer
            return
        out = (f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}\r\n"
               f"content-type: {answer.headers.get('content-type', 'application/json')}\r\n"
               f"content-length: {len(answer.content)}\r\nconnection: close\r\n\r\n").encode("latin-1")
        sock.sendall(out + answer.content)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_DropProxy]:
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder

    data = tmp_path_factory.mktemp("retry")
    settings = Settings(data_dir=data, shards=1, api_keys={APP: KEY})
    with serve_local(data, HashingEmbedder(dim=64), settings=settings) as live:
        px = _DropProxy(live.url)
        thread = threading.Thread(target=px.serve_forever, daemon=True)
        thread.start()
        try:
            yield px
        finally:
            px.shutdown()
            px.server_close()
            px.upstream.close()


def test_an_add_whose_answer_is_lost_is_retried_and_stored_once(proxy: _DropProxy) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    with MemoryClient(proxy.url, api_key=KEY, retry=Retry(backoff=0.01)) as mc:
        proxy.drops = 1
        entry = mc.add(APP, user, "Ines keeps bees on the roof.")
        assert [p.split("?")[0] for p in proxy.seen[-2:]] == [f"POST /v1/apps/{APP}/users/{user}/memories"] * 2
        assert [e.id for e in mc.read(APP, user)] == [entry.id]  # content-addressed: one memory
        proxy.drops = 1
        assert mc.delete(APP, user, entry.id) is None  # the lost delete happened; the retry's 404 is done
        assert mc.read(APP, user) == []
    with MemoryClient(proxy.url, api_key=KEY, retry=Retry.never()) as once:
        proxy.drops = 1
        with pytest.raises(Unreachable):
            once.add(APP, user, "Ines sells honey.")
        assert [e.text for e in once.read(APP, user)] == ["Ines sells honey."]  # stored although unanswered
