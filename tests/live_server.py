"""Run an ASGI app with uvicorn on 127.0.0.1 (ephemeral port) in a background thread.

::

    with LiveServer(app) as server:
        httpx.get(server.url + "/healthz")

:func:`raw_request` sends one request exactly as written (no client normalises its target).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


class LiveServer:
    def __init__(self, app: Any, *, startup_timeout: float = 20.0) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name=f"uvicorn-{self.port}", daemon=True)
        self._startup_timeout = startup_timeout

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def raw_request(url: str, method: str, target: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, decoded JSON body or None) of ``METHOD target HTTP/1.1`` sent over a plain socket to ``url``."""
    host, port = url.removeprefix("http://").split(":")
    head = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close", f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in (headers or {}).items())]
    if body:
        head.append("Content-Type: application/json")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    response = b"".join(chunks)
    status_line, _, rest = response.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    try:
        decoded = json.loads(payload) if payload else None
    except ValueError:
        decoded = None
    return int(status_line.split(b" ", 2)[1]), decoded
