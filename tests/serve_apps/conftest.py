"""A live HTTP server of :mod:`serve_apps.http.app`: uvicorn on 127.0.0.1 (ephemeral port) in a thread.

Fixtures:

- ``make_server(backend=..., settings=..., attach_backend=True, **settings_overrides)``: function
  scoped factory; by default a fresh ``LocalShardBackend`` (2 shards, hashing embedder) in ``tmp_path``;
- ``server``: one module-scoped server without auth (use distinct user ids per test);
- ``auth_server``: one module-scoped server with two apps and two keys (:data:`AUTH_KEYS`);
- ``serve_port`` (in ``tests/conftest.py``): Ray Serve's HTTP port (session scoped).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from actors.backend import LocalShardBackend
from memcore.settings import HttpSettings, Settings
from serve_apps.http.app import attach, create_app

AUTH_KEYS = {"app-a": "key-for-app-a-0123456789", "app-b": "key-for-app-b-9876543210"}
MAX_BODY = 65_536


@dataclass
class Served:
    url: str
    app: FastAPI
    backend: Any
    settings: Settings | None

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)


@contextmanager
def run_app(app: FastAPI, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread (``options``: uvicorn's, over quiet defaults);
    yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **{"log_level": "warning", "access_log": False, "lifespan": "off",
                                                   **options}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "data_dir": data_dir,
        "shards": 2,
        "embedder": {"kind": "hashing", "dim": 256},
        "http": HttpSettings(max_body_bytes=MAX_BODY),
    }
    base.update(overrides)
    return Settings(**base)


@contextmanager
def serve_local(
    data_dir: Path,
    embedder: Any,
    *,
    backend: Any = None,
    settings: Settings | None = None,
    attach_backend: bool = True,
    **overrides: Any,
) -> Iterator[Served]:
    with ExitStack() as stack:
        if settings is None:
            settings = make_settings(data_dir, **overrides)
        if backend is None and attach_backend:
            local = LocalShardBackend(settings, embedder=embedder)
            stack.callback(local.close)
            backend = local
        app = create_app()
        if attach_backend:
            attach(app, backend, settings)
        url = stack.enter_context(run_app(app))
        yield Served(url=url, app=app, backend=backend, settings=settings if attach_backend else None)


@pytest.fixture
def make_server(tmp_path: Path, hashing_embedder: Any) -> Iterator[Callable[..., Served]]:
    with ExitStack() as stack:
        count = 0

        def make(**kwargs: Any) -> Served:
            nonlocal count
            count += 1
            return stack.enter_context(serve_local(tmp_path / f"server-{count}", hashing_embedder, **kwargs))

        yield make


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(tmp_path_factory.mktemp("http-open"), hashing_embedder) as served:
        yield served


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(tmp_path_factory.mktemp("http-auth"), hashing_embedder, api_keys=AUTH_KEYS) as served:
        yield served


@pytest.fixture
def client(server: Served) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c
