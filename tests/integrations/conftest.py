"""Fixtures of the framework-adapter tests: a memcluster HTTP app over uvicorn (LocalShardBackend,
hashing embedder) per module, and the session's Ray Serve port for the tests on the Ray cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.serve_apps.conftest import Served, serve_local


@pytest.fixture(scope="module")
def memcluster(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    """memcluster with ingest (verbatim extractor: every user/assistant turn becomes a memory)."""
    with serve_local(tmp_path_factory.mktemp("integrations"), hashing_embedder) as served:
        yield served


@pytest.fixture(scope="session")
def serve_port(ray_session: Any) -> int:
    """Ray Serve's HTTP proxy on 127.0.0.1 (the same fixture as tests/serve_apps/conftest.py)."""
    from ray import serve

    from tests.conftest import free_port

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return port
