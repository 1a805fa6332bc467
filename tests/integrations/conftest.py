"""Fixtures of the framework-adapter tests: a memcluster HTTP app over uvicorn (LocalShardBackend,
hashing embedder) per module (the Ray-cluster variant lives in tests/serve_apps, next to serve_port)."""

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
