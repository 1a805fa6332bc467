"""VectorStore over a Qdrant server collection (``qdrant-client``).

One collection holds many users (and apps); every query carries the app AND user filter.
The collection is created when missing, with cosine vectors of ``dim`` and payload indexes
on app, user (the tenant field), kind, event_ts and deleted. Every write waits for the
server to apply it (``wait=True``), so an acknowledged write is in the server's WAL.

Tests run it on ``QdrantClient(":memory:")`` (the client's local mode, which ignores
payload indexes and says so in a warning that this adapter silences).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from qdrant_client import QdrantClient, models

from memcore.errors import StoreError
from memcore.ids import point_id
from memcore.model import Entry, Kind, UserKey
from memcore.ports import Vectors
from memcore.search_model import TopicsMatch
from memcore.stores.qdrant_common import (
    INDEXED_FIELDS,
    SCROLL_PAGE,
    TENANT_FIELD,
    FilterSpec,
    belongs,
    check_limit,
    engine_errors,
    from_payload,
    in_request_order,
    paginate,
    point_ids,
    points_filter,
    query_vector,
    scope_filter,
    to_payload,
    vector_rows,
)


def _client_filter(spec: FilterSpec) -> models.Filter | None:
    if spec.empty:
        return None
    must: list[models.Condition] = [
        models.FieldCondition(key=f, match=models.MatchValue(value=v)) for f, v in spec.matches
    ]
    must += [models.FieldCondition(key=f, match=models.MatchAny(any=list(vs))) for f, vs in spec.any_of]
    must += [models.FieldCondition(key=r.field, range=models.Range(gte=r.gte, lte=r.lte)) for r in spec.ranges]
    if spec.point_ids is not None:
        must.append(models.HasIdCondition(has_id=list(spec.point_ids)))
    if spec.active_only:
        must.append(models.FieldCondition(key="deleted", match=models.MatchValue(value=False)))
    return models.Filter(must=must)


def _scoped(spec: FilterSpec) -> models.Filter:
    flt = _client_filter(spec)
    if flt is None:
        raise ValueError("refusing an unscoped filter")
    return flt


def _index_schema(field: str, kind: str) -> models.PayloadSchemaParams:
    """The tenant field gets per-tenant HNSW graphs (``is_tenant``); the others none (``enable_hnsw=False``):
    every search is already narrowed to one user, so graphs per ``kind`` or ``deleted`` value would only
    cost build time (Qdrant's multitenancy guidance; the embedded engine is configured the same way)."""
    if field == TENANT_FIELD:
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    if kind == "keyword":
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False)
    if kind == "float":
        return models.FloatIndexParams(type=models.FloatIndexType.FLOAT, enable_hnsw=False)
    return models.BoolIndexParams(type=models.BoolIndexType.BOOL, enable_hnsw=False)


def _vector_size(params: Any) -> int | None:
    """The size of the collection's unnamed dense vector (None when it has none)."""
    if isinstance(params, models.VectorParams):
        return params.size
    unnamed = params.get("") if isinstance(params, dict) else None
    return unnamed.size if isinstance(unnamed, models.VectorParams) else None


class QdrantServerStore:
    """Entries of many users in one collection of a Qdrant server.

    Engine failures raise :class:`memcore.errors.StoreError`; bad arguments ``ValueError``.
    """

    db_system = "qdrant"
    """``db.system.name`` in search spans."""

    def __init__(self, client: QdrantClient, collection: str, dim: int, *, owns_client: bool = False,
                 layout: Mapping[str, Any] | None = None) -> None:
        """``owns_client``: :meth:`close` also closes ``client`` (true for :meth:`connect`). ``layout``:
        ``shard_number`` / ``replication_factor`` / ``write_consistency_factor`` and ``hnsw_config``
        (a mapping of :class:`qdrant_client.models.HnswConfigDiff` fields) used when this store creates the
        collection (an existing collection keeps its own)."""
        if dim < 1:
            raise ValueError("dim must be at least 1")
        self.layout = dict(layout or {})
        self.client = client
        self._owns_client = owns_client
        self.collection = collection
        self.dim = dim
        self._closed = False
        self._ensure_collection()

    @classmethod
    def connect(
        cls,
        *,
        url: str,
        collection: str,
        dim: int,
        api_key: str | None = None,
        https: bool | None = None,
        timeout: int | None = None,
        layout: Mapping[str, Any] | None = None,
    ) -> QdrantServerStore:
        """A store on the server at ``url`` (``https`` None: taken from the URL scheme)."""
        client = QdrantClient(url=url, api_key=api_key, https=https, timeout=timeout)
        try:
            return cls(client, collection, dim, owns_client=True, layout=layout)
        except BaseException:
            client.close()
            raise

    def _ensure_collection(self) -> None:
        with self._engine("collection setup") as client:
            if not client.collection_exists(self.collection):
                try:
                    layout = dict(self.layout)
                    if "hnsw_config" in layout:
                        layout["hnsw_config"] = models.HnswConfigDiff(**layout["hnsw_config"])
                    client.create_collection(
                        self.collection,
                        vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.COSINE),
                        **layout,
                    )
                except Exception:
                    if not client.collection_exists(self.collection):  # else: created concurrently
                        raise
            info = client.get_collection(self.collection)
            size = _vector_size(info.config.params.vectors)
            if size != self.dim:
                raise StoreError(
                    f"collection {self.collection!r} holds vectors of size {size}, not {self.dim}", field="dim"
                )
            existing = set(info.payload_schema or {})
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
                for field, kind in INDEXED_FIELDS.items():
                    if field not in existing:
                        schema = _index_schema(field, kind)
                        client.create_payload_index(self.collection, field, field_schema=schema, wait=True)

    @contextmanager
    def _engine(self, what: str) -> Iterator[QdrantClient]:
        """The client while the store is open; engine errors become StoreError."""
        if self._closed:
            raise StoreError(f"vector store on collection {self.collection!r} is closed", field="collection")
        with engine_errors(what):
            yield self.client

    # -- writes -------------------------------------------------------------------------

    def upsert(self, entries: Sequence[Entry], vectors: Vectors) -> None:
        """Insert or replace entries (by id) with their vectors (one row each)."""
        rows = vector_rows(entries, vectors, self.dim)
        if not entries:
            return
        points = [
            models.PointStruct(id=point_id(e.id), vector=row, payload=to_payload(e))
            for e, row in zip(entries, rows, strict=True)
        ]
        with self._engine("upsert") as client:
            client.upsert(self.collection, points=points, wait=True)

    def set_payload(self, entries: Sequence[Entry]) -> None:
        """Replace the stored entries (by id and scope) keeping their vectors; unknown ids are ignored."""
        if not entries:
            return
        ops: list[models.UpdateOperation] = [
            models.OverwritePayloadOperation(
                overwrite_payload=models.SetPayload(
                    payload=to_payload(e), filter=_scoped(scope_filter(e.key, ids=[e.id]))
                )
            )
            for e in entries
        ]
        with self._engine("set_payload") as client:
            client.batch_update_points(self.collection, update_operations=ops, wait=True)

    def delete(self, key: UserKey, ids: Sequence[str]) -> None:
        """Hard-delete entries of ``key`` by id (unknown ids and other users' ids are ignored)."""
        if ids:
            self._delete("delete", scope_filter(key, ids=ids))

    def delete_user(self, key: UserKey) -> None:
        """Hard-delete every entry of ``key``."""
        self._delete("delete_user", scope_filter(key))

    def _delete(self, what: str, spec: FilterSpec) -> None:
        selector = models.FilterSelector(filter=_scoped(spec))
        with self._engine(what) as client:
            client.delete(self.collection, points_selector=selector, wait=True)

    # -- reads --------------------------------------------------------------------------

    def get(self, key: UserKey, ids: Sequence[str]) -> list[Entry]:
        """Entries of ``key`` with these ids, tombstones included; unknown ids are absent."""
        if not ids:
            return []
        spec = scope_filter(key, ids=ids)
        with self._engine("get") as client:
            records, _ = client.scroll(
                self.collection, scroll_filter=_scoped(spec), limit=len(spec.point_ids or ()), with_payload=True
            )
            found = [from_payload(r.payload) for r in records]
        return in_request_order([e for e in found if belongs(e, key)], ids)

    def get_with_vectors(self, key: UserKey, ids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        """:meth:`get` with each found entry's stored vector (one row each, in the entries' order)."""
        found, rows = self.get_points(key, point_ids(ids))
        order = {e.id: i for i, e in enumerate(found)}
        entries = in_request_order(found, ids)
        return entries, rows[[order[e.id] for e in entries]] if entries else rows

    def get_points(self, key: UserKey, pids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        """The entries of ``key`` under these point ids (tombstones included) with their stored vectors, in the
        store's order; unknown ids are absent."""
        if not pids:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        spec = points_filter(key, pids)
        with self._engine("get") as client:
            records, _ = client.scroll(
                self.collection, scroll_filter=_scoped(spec), limit=len(spec.point_ids or ()), with_payload=True,
                with_vectors=True,
            )
            found = [(e, r.vector) for r in records if belongs(e := from_payload(r.payload), key)]
        rows = [v.get("", next(iter(v.values()))) if isinstance(v, dict) else v for _, v in found]
        return [e for e, _ in found], np.asarray(rows, dtype=np.float32).reshape(-1, self.dim)

    def search(
        self,
        key: UserKey,
        vector: npt.NDArray[np.float32],
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[Entry, float]]:
        """Active entries of ``key`` nearest to ``vector`` (cosine), best first; ``metadata``: payload
        string equalities (``("metadata.<key>", value)``, see :func:`memcore.metadata.pushdown`);
        ``topics``: entries with any (``topics_match="any"``) or all (``"all"``) of these topics."""
        spec = scope_filter(key, active_only=True, kind=kind, time_from=time_from, time_to=time_to, metadata=metadata,
                            topics=topics, topics_match=topics_match)
        query, top = query_vector(vector, self.dim), check_limit(limit)
        with self._engine("search") as client:
            response = client.query_points(
                self.collection,
                query=query,
                query_filter=_scoped(spec),
                limit=top,
                with_payload=True,
                with_vectors=False,
            )
            hits = [(from_payload(p.payload), float(p.score)) for p in response.points]
        return [(e, s) for e, s in hits if belongs(e, key)]

    def search_points(
        self,
        key: UserKey,
        vector: npt.NDArray[np.float32],
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[str, float]]:
        """:meth:`search` as (point id, cosine) pairs: no payload is read (the filter still scopes the user)."""
        spec = scope_filter(key, active_only=True, kind=kind, time_from=time_from, time_to=time_to, metadata=metadata,
                            topics=topics, topics_match=topics_match)
        with self._engine("search") as client:
            response = client.query_points(self.collection, query=query_vector(vector, self.dim),
                                           query_filter=_scoped(spec), limit=check_limit(limit), with_payload=False,
                                           with_vectors=False)
            return [(str(p.id), float(p.score)) for p in response.points]

    def scroll(self, key: UserKey | None = None, *, include_deleted: bool = True) -> Iterator[Entry]:
        """Every entry of ``key`` (or of the whole collection when ``key`` is None), in point-id order."""
        flt = _client_filter(scope_filter(key, active_only=not include_deleted))

        def fetch(offset: Any) -> tuple[list[Entry], Any]:
            with self._engine("scroll") as client:
                records, nxt = client.scroll(
                    self.collection, scroll_filter=flt, limit=SCROLL_PAGE, offset=offset, with_payload=True
                )
                return [from_payload(r.payload) for r in records], nxt

        return paginate(fetch)

    def scroll_with_vectors(
        self, key: UserKey | None = None, *, include_deleted: bool = True
    ) -> Iterator[tuple[list[Entry], Vectors]]:
        """Pages of (entries, their vectors) of ``key`` (or of the whole collection), for copying."""
        flt = _client_filter(scope_filter(key, active_only=not include_deleted))
        offset: Any = None
        while True:
            with self._engine("scroll") as client:
                records, offset = client.scroll(self.collection, scroll_filter=flt, limit=SCROLL_PAGE, offset=offset,
                                                with_payload=True, with_vectors=True)
            if records:
                rows = [r.vector.get("", next(iter(r.vector.values()))) if isinstance(r.vector, dict) else r.vector
                        for r in records]
                yield [from_payload(r.payload) for r in records], np.asarray(rows, dtype=np.float32)
            if offset is None or not records:
                return

    def count(self, key: UserKey | None = None, *, include_deleted: bool = False) -> int:
        """Number of entries of ``key`` (or of the collection), active only unless asked otherwise."""
        flt = _client_filter(scope_filter(key, active_only=not include_deleted))
        with self._engine("count") as client:
            return int(client.count(self.collection, count_filter=flt, exact=True).count)

    def close(self) -> None:
        """Stop serving calls (and close the client when owned); a second close is a no-op."""
        if not self._closed:
            self._closed = True
            if self._owns_client:
                with engine_errors("close"):
                    self.client.close()


# -- generations (re-extraction): a collection per generation behind one alias ---------------


def switch_alias(client: QdrantClient, alias: str, collection: str) -> None:
    """Point ``alias`` at ``collection`` in one ``update_collection_aliases`` call (atomic on the server).

    Fails when a real collection holds the name ``alias`` (generation 1 of a deployment that
    predates generations): drop or rename it first.
    """
    with engine_errors("alias switch"):
        aliased = any(a.alias_name == alias for a in client.get_aliases().aliases)
        if not aliased and client.collection_exists(alias):
            raise StoreError(f"a collection named {alias!r} exists; an alias cannot take its name", field="collection")
        ops: list[models.AliasOperations] = []
        if aliased:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=collection, alias_name=alias)))
        client.update_collection_aliases(change_aliases_operations=ops)


def alias_target(client: QdrantClient, alias: str) -> str | None:
    """The collection ``alias`` points at, or None."""
    with engine_errors("alias lookup"):
        for a in client.get_aliases().aliases:
            if a.alias_name == alias:
                return str(a.collection_name)
    return None
