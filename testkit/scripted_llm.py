"""A scripted OpenAI-compatible chat server for tests, driven through the real ``openai`` client.

A :class:`ScriptedLLM` is a ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port) that serves
``POST /v1/chat/completions`` by replaying a script, one item per request, and records every
request body it received (``.requests``). Script items:

- a ``str``: an assistant text answer;
- :func:`tool_call` / a list of them: an assistant message with ``tool_calls``;
- a :class:`Reply`: full control (content, tool calls, HTTP status, raw body, delay);
- a callable ``(request_json) -> item``: computes the answer from the request.

A request with ``"stream": true`` gets the same answer as server-sent ``chat.completion.chunk`` events
(a role chunk, the content, each tool call, the finish reason, ``[DONE]``), as streaming clients expect.

When the script runs out the server answers 500 (and records the request), so a test fails
loudly instead of hanging. For fault tests, build the ``openai`` client with ``max_retries=0``.

::

    with ScriptedLLM(["hello", [tool_call("memory_add", {"memory": "x"})]]) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test")
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeAlias

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any] | str
    id: str = ""

    def wire(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(dict(self.arguments))
        return {"id": self.id or f"call_{next(_ids)}", "type": "function",
                "function": {"name": self.name, "arguments": args}}


def tool_call(name: str, arguments: Mapping[str, Any] | str, id: str = "") -> ToolCall:
    """One tool call; ``arguments`` may be a raw string (e.g. deliberately malformed JSON)."""
    return ToolCall(name, arguments, id)


@dataclass(frozen=True)
class Reply:
    """A fully specified answer: a message, or an error ``status`` with ``body``, after ``delay`` s."""

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    status: int = 200
    body: Any = None
    delay: float = 0.0
    finish_reason: str | None = None


Item: TypeAlias = "str | ToolCall | Sequence[ToolCall] | Reply | Callable[[dict[str, Any]], Item]"


def _as_reply(item: Any, request: dict[str, Any]) -> Reply:
    while callable(item):
        item = item(request)
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(content=item)
    if isinstance(item, ToolCall):
        return Reply(tool_calls=(item,))
    return Reply(tool_calls=tuple(item))


def completion(reply: Reply, model: str) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` wire object for a reply."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [c.wire() for c in reply.tool_calls]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def stream_events(done: Mapping[str, Any]) -> bytes:
    """A ``chat.completion`` answer as the server-sent events of a streamed one."""
    choice = done["choices"][0]
    message = choice["message"]
    head = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"], "model": done["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append({**head, "choices": [], "usage": done.get("usage")})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@dataclass
class ScriptedLLM:
    script: list[Any] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    no_delay: bool = False
    """Answer with TCP_NODELAY (no Nagle / delayed-ACK stall of about 40 ms; benchmarks want it)."""

    def __post_init__(self) -> None:
        self.script = list(self.script)
        self._lock = threading.Lock()
        handler = _handler(self)
        handler.disable_nagle_algorithm = self.no_delay
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-llm", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *items: Any) -> None:
        """Append items to the script."""
        with self._lock:
            self.script.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self.script)

    def respond(self, request: dict[str, Any]) -> tuple[int, Any, float]:
        with self._lock:
            self.requests.append(request)
            item = self.script.pop(0) if self.script else None
        if item is None:
            return 500, {"error": {"message": "scripted LLM: script exhausted", "type": "server_error"}}, 0.0
        reply = _as_reply(item, request)
        if reply.status != 200 or reply.body is not None:
            return reply.status, reply.body, reply.delay
        return 200, completion(reply, str(request.get("model", "scripted"))), reply.delay

    def start(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _handler(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON"}})
                return
            status, body, delay = llm.respond(request)
            if delay:
                time.sleep(delay)
            try:
                if request.get("stream") and status == 200 and isinstance(body, dict) and "choices" in body:
                    self._send(status, stream_events(body), "text/event-stream")
                    self.close_connection = True  # an event stream ends with its connection
                else:
                    self._send(status, body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                self.close_connection = True

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if content_type == "text/event-stream":
                self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


def messages_text(request: Mapping[str, Any], role: str | None = None) -> str:
    """All message contents of a recorded request (optionally of one role), joined by newlines."""
    out: list[str] = []
    for m in request.get("messages", []):
        if role is None or m.get("role") == role:
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            if content:
                out.append(str(content))
    return "\n".join(out)


def iter_tool_messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``role: tool`` messages of a recorded request."""
    return [m for m in request.get("messages", []) if m.get("role") == "tool"]


_SMALL_ID_LINE = re.compile(r"^\[(\d+)\] \((?:fact|episode)\) (.*)$", re.MULTILINE)


def small_ids(request: Mapping[str, Any]) -> dict[int, str]:
    """The existing memories an extractor request shows as ``[n] (kind) text``: ``{n: text}``."""
    return {int(n): text for n, text in _SMALL_ID_LINE.findall(messages_text(request))}


def small_id(request: Mapping[str, Any], needle: str) -> int:
    """The small id of the one shown memory whose text contains ``needle`` (AssertionError otherwise)."""
    found = [n for n, text in small_ids(request).items() if needle in text]
    assert len(found) == 1, f"{needle!r} is shown as {found} in {small_ids(request)}"
    return found[0]
