from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memcore.service import MemoryService
from memcore.settings import ServiceConfig


class StepClock:
    """A deterministic clock: every call is one second after the previous one."""

    def __init__(self) -> None:
        self.t = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def _vector_store(backend: str, path: Path, dim: int):  # type: ignore[no-untyped-def]
    if backend == "edge":
        from memcore.stores.qdrant_edge import QdrantEdgeStore

        return QdrantEdgeStore(path / "vectors", dim)
    from qdrant_client import QdrantClient

    from memcore.stores.qdrant import QdrantServerStore

    return QdrantServerStore(QdrantClient(":memory:"), "memories", dim)


@pytest.fixture
def make_service(tmp_path: Path, hashing_embedder) -> Iterator[Callable[..., MemoryService]]:  # type: ignore[no-untyped-def]
    from memcore.stores.tantivy_index import TantivyIndex

    made: list[MemoryService] = []

    def make(backend: str = "edge", *, embedder=None, soft_delete: bool = True, name: str = "s") -> MemoryService:  # type: ignore[no-untyped-def]
        emb = embedder or hashing_embedder
        root = tmp_path / f"{name}-{backend}"
        root.mkdir(parents=True, exist_ok=True)
        svc = MemoryService(
            _vector_store(backend, root, emb.dim),
            TantivyIndex(root / "keywords"),
            emb,
            ServiceConfig(soft_delete=soft_delete),
            clock=StepClock(),
        )
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.vectors.close()
        svc.keywords.close()


@pytest.fixture(params=["edge", "server"])
def service(request: pytest.FixtureRequest, make_service: Callable[..., MemoryService]) -> MemoryService:
    return make_service(request.param)
