"""VectorStore over Qdrant Edge (``qdrant-edge-py``): one embedded shard per directory.

Durability: every update goes to the shard's write-ahead log and is then flushed, so an
acknowledged write survives the process dying right after it. Opening a directory that
already holds a shard loads it (the dimension is checked); otherwise a new shard is created.
Only one process may hold a directory open at a time (the engine locks its WAL).

Indexes: app, user (tenant), kind, event_ts and deleted_at get payload indexes, so a search
scoped to one user only scores that user's points. "Active only" is ``deleted_at`` empty,
not ``deleted == false``: qdrant-edge-py 0.9.0 converts ``MatchValue(False)`` to the
integer 0, which never matches a boolean payload value (Entry.to_payload writes both).

Edge runs no background optimizer: segments stay plain (brute force over the filtered
points, fast per user) until :meth:`QdrantEdgeStore.optimize` is called, which builds HNSW
and vacuums deletions and can take minutes for 100k points; call it from maintenance,
never on the write path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import qdrant_edge as qe

from memcore import telemetry
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

#: Tombstone marker tested for "active only" (null or missing = active); indexed as a keyword
#: in place of the ``deleted`` flag, which this engine's binding cannot match (see below).
TOMBSTONE_FIELD = "deleted_at"
EDGE_INDEXES: dict[str, Literal["keyword", "float", "bool"]] = {
    f: k for f, k in INDEXED_FIELDS.items() if f != "deleted"
} | {TOMBSTONE_FIELD: "keyword"}


HNSW_M, HNSW_EF_CONSTRUCT, FULL_SCAN_THRESHOLD_KB = 16, 100, 10_000
"""Qdrant's default HNSW graph (links per node, build beam, size under which a filtered search scans instead),
stated where a build sets its thread count (the engine takes the graph and the threads together)."""


def edge_filter(spec: FilterSpec) -> qe.Filter | None:
    if spec.empty:
        return None
    must: list[Any] = [qe.FieldCondition(f, match=qe.MatchValue(v)) for f, v in spec.matches]
    must += [qe.FieldCondition(f, match=qe.MatchAny(list(vs))) for f, vs in spec.any_of]
    must += [qe.FieldCondition(r.field, range=qe.RangeFloat(gte=r.gte, lte=r.lte)) for r in spec.ranges]
    if spec.point_ids is not None:
        must.append(qe.HasIdCondition(set(spec.point_ids)))
    if spec.active_only:
        # not ``deleted == false``: qdrant-edge-py 0.9.0 turns MatchValue(False) into the
        # integer 0, which never matches a boolean payload value.
        must.append(qe.IsEmptyCondition(TOMBSTONE_FIELD))
    return qe.Filter(must=must)


def _index_params(field: str, kind: str) -> Any:
    """Index parameters: the tenant field gets per-tenant HNSW links, the others none."""
    if field == TENANT_FIELD:
        return qe.KeywordIndexParams(is_tenant=True)
    if kind == "keyword":
        return qe.KeywordIndexParams(enable_hnsw=False)
    if kind == "float":
        return qe.FloatIndexParams(enable_hnsw=False)
    return qe.BoolIndexParams(enable_hnsw=False)


def _dense(vector: Any) -> Any:
    """The unnamed dense vector of a record (a list, or a dict keyed by vector name), as given (a sequence of
    floats: numpy converts the rows at once, ~20 µs a row less than a Python loop over 384 floats)."""
    if isinstance(vector, dict):
        vector = vector.get("", next(iter(vector.values())))
    return vector


class QdrantEdgeStore:
    """An embedded Qdrant shard in ``path`` holding ``dim``-dimensional cosine vectors.

    Calls are serialised by a lock (the store may be shared by threads of one actor).
    Engine failures raise :class:`memcore.errors.StoreError`; bad arguments ``ValueError``.
    """

    db_system = "qdrant"
    """``db.system.name`` in search spans."""

    def __init__(self, path: str | Path, dim: int, *, shard: int | None = None,
                 indexing_threshold_kb: int | None = None, indexing_threads: int | None = None) -> None:
        """``indexing_threshold_kb``: the engine's optimizer builds HNSW for segments above this size (None:
        the engine's default, 10 MB; the build process of a dedicated store indexes whatever it holds);
        ``indexing_threads``: threads of an HNSW build (None: the engine's default, every CPU), with the
        engine's default graph (:data:`HNSW_M`, :data:`HNSW_EF_CONSTRUCT`, :data:`FULL_SCAN_THRESHOLD_KB`)."""
        if dim < 1:
            raise ValueError("dim must be at least 1")
        self.dim = dim
        self._flush_labels = {"shard": "-" if shard is None else str(shard), "engine": "qdrant_edge"}
        self.path = Path(path)
        self._lock = threading.RLock()
        optimizers = None if indexing_threshold_kb is None else qe.EdgeOptimizersConfig(
            indexing_threshold=indexing_threshold_kb)
        hnsw = None if indexing_threads is None else qe.HnswIndexConfig(
            m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=FULL_SCAN_THRESHOLD_KB,
            max_indexing_threads=indexing_threads)
        config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, hnsw_config=hnsw),
                               optimizers=optimizers)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if self._holds_shard():
                edge = qe.EdgeShard.load(str(self.path), config)
            else:
                edge = qe.EdgeShard.create(str(self.path), config)
        except Exception as exc:
            raise StoreError(f"cannot open vector shard {self.path}: {exc}", field="path") from exc
        self._shard: qe.EdgeShard | None = edge
        try:
            self._ensure_indexes()
        except BaseException:
            self.close()
            raise

    def _holds_shard(self) -> bool:
        segments = self.path / "segments"
        return (self.path / "edge_config.json").exists() or (segments.is_dir() and any(segments.iterdir()))

    def _ensure_indexes(self) -> None:
        with self._engine("index creation") as shard:
            existing = set(shard.info().payload_schema)
            missing = [(f, k) for f, k in EDGE_INDEXES.items() if f not in existing]
            for field, kind in missing:
                shard.update(qe.UpdateOperation.create_field_index(field, _index_params(field, kind)))
            if missing:
                shard.flush()

    @contextmanager
    def _engine(self, what: str) -> Iterator[qe.EdgeShard]:
        """The open shard, under the lock; engine errors become StoreError."""
        with self._lock:
            if self._shard is None:
                raise StoreError(f"vector store {self.path} is closed", field="path")
            with engine_errors(what):
                yield self._shard

    def _apply(self, what: str, operations: Sequence[qe.UpdateOperation]) -> None:
        """Applies updates in order, then flushes: nothing acknowledged is left only in memory."""
        if not operations:
            return
        with self._engine(what) as shard:
            for op in operations:
                shard.update(op)
            with telemetry.timed("memcluster_vector_flush_ms", **self._flush_labels):
                shard.flush()

    @staticmethod
    def _filter(spec: FilterSpec) -> qe.Filter:
        flt = edge_filter(spec)
        if flt is None:
            raise ValueError("refusing an unscoped filter")
        return flt

    # -- writes -------------------------------------------------------------------------

    def upsert(self, entries: Sequence[Entry], vectors: Vectors) -> None:
        """Insert or replace entries (by id) with their vectors (one row each)."""
        rows = vector_rows(entries, vectors, self.dim)
        points = [qe.Point(point_id(e.id), row, to_payload(e)) for e, row in zip(entries, rows, strict=True)]
        self._apply("upsert", [qe.UpdateOperation.upsert_points(points)] if points else [])

    def set_payload(self, entries: Sequence[Entry]) -> None:
        """Replace the stored entries (by id and scope) keeping their vectors; unknown ids are ignored."""
        ops = [
            qe.UpdateOperation.overwrite_payload_by_filter(self._filter(scope_filter(e.key, ids=[e.id])), to_payload(e))
            for e in entries
        ]
        self._apply("set_payload", ops)

    def delete(self, key: UserKey, ids: Sequence[str]) -> None:
        """Hard-delete entries of ``key`` by id (unknown ids and other users' ids are ignored)."""
        if ids:
            flt = self._filter(scope_filter(key, ids=ids))
            self._apply("delete", [qe.UpdateOperation.delete_points_by_filter(flt)])

    def delete_user(self, key: UserKey) -> None:
        """Hard-delete every entry of ``key``."""
        flt = self._filter(scope_filter(key))
        self._apply("delete_user", [qe.UpdateOperation.delete_points_by_filter(flt)])

    # -- reads --------------------------------------------------------------------------

    def get(self, key: UserKey, ids: Sequence[str]) -> list[Entry]:
        """Entries of ``key`` with these ids, tombstones included; unknown ids are absent."""
        if not ids:
            return []
        spec = scope_filter(key, ids=ids)
        request = qe.ScrollRequest(limit=len(spec.point_ids or ()), filter=self._filter(spec), with_payload=True)
        with self._engine("get") as shard:
            records, _ = shard.scroll(request)
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
        request = qe.ScrollRequest(limit=len(spec.point_ids or ()), filter=self._filter(spec), with_payload=True,
                                   with_vector=True)
        with self._engine("get") as shard:
            records, _ = shard.scroll(request)
            found = [(e, r.vector) for r in records if belongs(e := from_payload(r.payload), key)]
        rows = np.asarray([_dense(v) for _, v in found], dtype=np.float32).reshape(-1, self.dim)
        return [e for e, _ in found], rows

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
        request = qe.QueryRequest(
            limit=check_limit(limit),
            query=qe.Query.Nearest(query_vector(vector, self.dim)),
            filter=self._filter(spec),
            with_payload=True,
            with_vector=False,
        )
        with self._engine("search") as shard:
            hits = [(from_payload(p.payload), float(p.score)) for p in shard.query(request)]
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
        request = qe.QueryRequest(limit=check_limit(limit), query=qe.Query.Nearest(query_vector(vector, self.dim)),
                                  filter=self._filter(spec), with_payload=False, with_vector=False)
        with self._engine("search") as shard:
            return [(str(p.id), float(p.score)) for p in shard.query(request)]

    def scroll(self, key: UserKey | None = None, *, include_deleted: bool = True) -> Iterator[Entry]:
        """Every entry of ``key`` (or of the whole store when ``key`` is None), in point-id order."""
        flt = edge_filter(scope_filter(key, active_only=not include_deleted))

        def fetch(offset: Any) -> tuple[list[Entry], Any]:
            request = qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, filter=flt, with_payload=True)
            with self._engine("scroll") as shard:
                records, nxt = shard.scroll(request)
                return [from_payload(r.payload) for r in records], nxt

        return paginate(fetch)

    def scroll_with_vectors(
        self, key: UserKey | None = None, *, include_deleted: bool = True, page: int = SCROLL_PAGE
    ) -> Iterator[tuple[list[Entry], Vectors]]:
        """Pages of (entries, their vectors) of ``key`` (or of the whole store), for copying a store; ``page``:
        points per engine call (the call converts them holding the GIL)."""
        flt = edge_filter(scope_filter(key, active_only=not include_deleted))
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=check_limit(page), filter=flt, with_payload=True,
                                       with_vector=True)
            with self._engine("scroll") as shard:
                records, offset = shard.scroll(request)
            if records:
                entries = [from_payload(r.payload) for r in records]
                yield entries, np.asarray([_dense(r.vector) for r in records], dtype=np.float32)
            if offset is None or not records:
                return

    def count(self, key: UserKey | None = None, *, include_deleted: bool = False) -> int:
        """Number of entries of ``key`` (or of the whole store), active only unless asked otherwise."""
        flt = edge_filter(scope_filter(key, active_only=not include_deleted))
        with self._engine("count") as shard:
            return int(shard.count(qe.CountRequest(exact=True, filter=flt)))

    def heavy_users(self, min_entries: int, *, limit: int = 64) -> list[tuple[UserKey, int]]:
        """Users (of any app) holding at least ``min_entries`` points, tombstones included, largest first
        (at most ``limit``): facet counts on the tenant field, then per app of each large tenant."""
        if min_entries < 1:
            raise ValueError("min_entries must be at least 1")
        with self._engine("facet") as shard:
            tenants = [(str(h.value), int(h.count)) for h in shard.facet(qe.FacetRequest(TENANT_FIELD, limit=limit))]
            found: list[tuple[UserKey, int]] = []
            for user, total in tenants:
                if total < min_entries:
                    continue
                only = qe.Filter(must=[qe.FieldCondition(TENANT_FIELD, match=qe.MatchValue(user))])
                apps = shard.facet(qe.FacetRequest("app", limit=limit, exact=True, filter=only))
                found += [(UserKey(app=str(h.value), user=user), int(h.count)) for h in apps if h.count >= min_entries]
        return sorted(found, key=lambda kc: (-kc[1], kc[0].app, kc[0].user))

    # -- maintenance --------------------------------------------------------------------

    def optimize(self) -> bool:
        """Run the engine's optimizers (HNSW build, vacuum, merge) to completion; blocking."""
        with self._engine("optimize") as shard:
            changed = bool(shard.optimize())
            with telemetry.timed("memcluster_vector_flush_ms", **self._flush_labels):
                shard.flush()
        return changed

    def close(self) -> None:
        """Flush and release the directory; a second close is a no-op."""
        with self._lock:
            shard, self._shard = self._shard, None
            if shard is None:
                return
            with engine_errors("close"):
                try:
                    shard.flush()
                finally:
                    shard.close()

    def __enter__(self) -> QdrantEdgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
