"""Qdrant Edge in tiers: small users share the shard's store, large users get a store of their own with an
HNSW index built in another process (Qdrant's "tiered multitenancy", on the embedded engine).

Why: Qdrant Edge builds no HNSW graph unless :meth:`QdrantEdgeStore.optimize` runs, and ``optimize`` holds
the GIL of the process that calls it for the whole build (tens of seconds per 50k points), so the shard
could not serve while it runs. A user below ``min_entries`` is searched by brute force over their own
points (filtered by the tenant index: about a millisecond per thousand points); a user above it is
*promoted*:

1. the user's points (tombstones included) are exported page by page to a staging directory (each page
   is a short call; searches and writes go on between pages), and every id the user writes meanwhile is
   remembered;
2. a child process (``python -m memcore.stores.hnsw_build``, at a lower priority) loads them into a new Edge store
   and runs ``optimize`` there: its GIL is not the shard's;
3. the switch, under the store's exclusive lock (writes and reads of this store wait a few milliseconds):
   the ids written during the build are copied again from the serving store (or deleted, when gone), and
   the manifest ``tiers.json`` is replaced atomically (temp file, fsync, rename, fsync of the directory) to
   name the new store; then, outside the lock, the user's old points are deleted from the shared store
   (whole-store scrolls and counts leave them out meanwhile).

A promoted user whose store has grown by ``rebuild_growth`` since its build (new points land in an
unindexed segment, searched by brute force) is rebuilt the same way from their own store, which is then
closed and deleted. Nothing written during a build is lost: every write takes the store's shared lock,
and a write to a user being built records its ids under it.

Invariant (what makes a crash harmless): whenever the manifest names a user's store, that store holds
all of the user's points. Opening the store deletes staging leftovers and any copy of a promoted user
still in the shared store (a crash between the manifest and the delete), so no point is served twice.

Compaction (:func:`compact_dir`, or a serving compaction: :func:`memcore.stores.edge_compaction.write_fresh` of
every tier's pages, then :func:`swap_in`) copies every tier into one fresh shared directory and then drops
the tiers (:func:`drop_tiers`): deleted points leave every file, and the next maintenance promotes large
users again.

Layout: ``<vectors>.users/`` beside the shared ``<vectors>`` directory holds ``tiers.json`` and one
directory per promoted user (``<digest>-<build>``); see :mod:`memcore.layout`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore import telemetry
from memcore.errors import StoreError
from memcore.ids import point_id
from memcore.layout import tiers_dir
from memcore.model import Entry, Kind, UserKey
from memcore.ports import Vectors
from memcore.read_write_lock import ReadWriteLock
from memcore.search_model import TopicsMatch
from memcore.stores import edge_compaction, hnsw_build
from memcore.stores.qdrant_edge import QdrantEdgeStore

log = logging.getLogger(__name__)

MANIFEST = "tiers.json"
STAGING_PREFIX = "staging-"


def drop_tiers(path: str | Path) -> None:
    """Forget and delete every dedicated store of ``path`` (after a compaction copied them into ``path``):
    the manifest goes first, so a crash in between leaves directories that the next open deletes."""
    tiers = tiers_dir(path)
    manifest = tiers / MANIFEST
    if manifest.exists():
        manifest.unlink()
        _fsync_dir(tiers)
    shutil.rmtree(tiers, ignore_errors=True)


def swap_in(path: str | Path) -> None:
    """:func:`memcore.stores.edge_compaction.swap_in` of a fresh copy that holds every tier, then the tiers go."""
    edge_compaction.swap_in(path)
    drop_tiers(path)


def compact_dir(path: str | Path, dim: int) -> int:
    """Rewrite the (closed) store at ``path`` and its tiers as one shared directory with only the stored
    points (tombstones included; deleted points, write-ahead logs and payload pages do not survive); returns
    the points copied."""
    path = Path(path)
    edge_compaction.recover_compaction(path)
    if not path.exists():
        return 0
    with TieredEdgeStore(path, dim, min_entries=0) as src:
        copied = edge_compaction.write_fresh(path, dim, src.scroll_with_vectors(None, include_deleted=True))
    swap_in(path)
    return copied


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digest(key: UserKey) -> str:
    return hashlib.sha256(f"{key.app}\0{key.user}".encode()).hexdigest()[:24]


@dataclass
class _Tier:
    key: UserKey
    directory: str
    built_points: int
    store: QdrantEdgeStore


@dataclass
class _Build:
    changed: set[str] = field(default_factory=set)
    cleared: bool = False


class TieredEdgeStore:
    """A :class:`memcore.ports.VectorStore` over one shared Qdrant Edge store and dedicated stores of large
    users (see the module docstring). Reads and writes of a user go to the store that holds them;
    whole-store scrolls and counts cover every tier (scrolls in point-id order, as one store's would)."""

    db_system = "qdrant"
    """``db.system.name`` in search spans."""

    def __init__(self, path: str | Path, dim: int, *, shard: int | None = None, min_entries: int = 10_000,
                 rebuild_growth: float = 0.25) -> None:
        """``min_entries``: a user with at least this many points is promoted by :meth:`maintain` (0: never);
        ``rebuild_growth``: a dedicated store is rebuilt once it holds this fraction more points than at
        its build."""
        self.path = Path(path)
        self.dim = dim
        self.min_entries = min_entries
        self.rebuild_growth = rebuild_growth
        self._shard_label = shard
        self._rw = ReadWriteLock()
        self._mutex = threading.Lock()  # routing table and build marks
        self._tiers: dict[UserKey, _Tier] = {}
        self._builds: dict[UserKey, _Build] = {}
        self._hidden: set[UserKey] = set()
        """Promoted users whose old copy in the shared store is being deleted (never served from there)."""
        self._maintaining = threading.Lock()
        self._closed = False
        self.shared = QdrantEdgeStore(self.path, dim, shard=shard)
        try:
            self._open_tiers()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ manifest
    @property
    def tiers_path(self) -> Path:
        return tiers_dir(self.path)

    def _read_manifest(self) -> list[dict[str, Any]]:
        try:
            text = (self.tiers_path / MANIFEST).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        users = json.loads(text)["users"]
        if not isinstance(users, list):
            raise StoreError(f"{self.tiers_path / MANIFEST} is not a tier manifest", field="path")
        return users

    def _write_manifest(self, tiers: Sequence[_Tier]) -> None:
        base = self.tiers_path
        base.mkdir(parents=True, exist_ok=True)
        body = {"users": [{"app": t.key.app, "user": t.key.user, "dir": t.directory,
                           "built_points": t.built_points} for t in sorted(tiers, key=lambda t: t.directory)]}
        tmp = base / f".{MANIFEST}.{os.getpid()}.tmp"
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(body, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, base / MANIFEST)
        _fsync_dir(base)

    def _open_tiers(self) -> None:
        rows = self._read_manifest()
        named = {row["dir"] for row in rows}
        if self.tiers_path.is_dir():  # staging and builds a crash left behind, stores no manifest names
            for child in self.tiers_path.iterdir():
                if child.is_dir() and child.name not in named:
                    shutil.rmtree(child, ignore_errors=True)
        for row in rows:
            key = UserKey(app=row["app"], user=row["user"])
            store = QdrantEdgeStore(self.tiers_path / row["dir"], self.dim, shard=self._shard_label)
            self._tiers[key] = _Tier(key, row["dir"], int(row["built_points"]), store)
            if self.shared.count(key, include_deleted=True):  # a crash between the manifest and the delete
                self.shared.delete_user(key)

    # ------------------------------------------------------------------ routing
    def _store(self, key: UserKey) -> QdrantEdgeStore:
        tier = self._tiers.get(key)
        return tier.store if tier is not None else self.shared

    def _stores(self) -> list[QdrantEdgeStore]:
        return [self.shared, *(t.store for t in self._tiers.values())]

    def _hidden_now(self) -> set[UserKey]:
        with self._mutex:
            return set(self._hidden)

    def _note(self, key: UserKey, ids: Sequence[str] = (), *, cleared: bool = False) -> None:
        with self._mutex:
            build = self._builds.get(key)
            if build is not None:
                build.changed.update(ids)
                build.cleared = build.cleared or cleared

    def tiers(self) -> dict[UserKey, int]:
        """The promoted users and the points each one's store holds (tombstones included)."""
        with self._rw.shared():
            return {k: t.store.count(k, include_deleted=True) for k, t in self._tiers.items()}

    # ------------------------------------------------------------------ writes
    def upsert(self, entries: Sequence[Entry], vectors: Vectors) -> None:
        """Insert or replace entries (by id) with their vectors, each in the store of its user."""
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(entries):
            raise ValueError(f"expected vectors of shape ({len(entries)}, {self.dim}), got {tuple(rows.shape)}")
        with self._rw.shared():
            groups: dict[UserKey, list[int]] = {}
            for i, e in enumerate(entries):
                groups.setdefault(e.key, []).append(i)
            for key, idx in groups.items():
                self._store(key).upsert([entries[i] for i in idx], rows[idx])
                self._note(key, [entries[i].id for i in idx])

    def set_payload(self, entries: Sequence[Entry]) -> None:
        """Replace the stored entries (by id and scope) keeping their vectors; unknown ids are ignored."""
        with self._rw.shared():
            groups: dict[UserKey, list[Entry]] = {}
            for e in entries:
                groups.setdefault(e.key, []).append(e)
            for key, group in groups.items():
                self._store(key).set_payload(group)
                self._note(key, [e.id for e in group])

    def delete(self, key: UserKey, ids: Sequence[str]) -> None:
        """Hard-delete entries of ``key`` by id (unknown ids and other users' ids are ignored)."""
        with self._rw.shared():
            self._store(key).delete(key, ids)
            self._note(key, ids)

    def delete_user(self, key: UserKey) -> None:
        """Hard-delete every entry of ``key``; a dedicated store is closed and its directory deleted."""
        with self._rw.exclusive():
            tier = self._tiers.pop(key, None)
            if tier is not None:
                self._write_manifest(list(self._tiers.values()))
                tier.store.close()
                shutil.rmtree(self.tiers_path / tier.directory, ignore_errors=True)
            self.shared.delete_user(key)
            self._note(key, cleared=True)

    # ------------------------------------------------------------------ reads
    def get(self, key: UserKey, ids: Sequence[str]) -> list[Entry]:
        with self._rw.shared():
            return self._store(key).get(key, ids)

    def get_with_vectors(self, key: UserKey, ids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        with self._rw.shared():
            return self._store(key).get_with_vectors(key, ids)

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
        with self._rw.shared():
            return self._store(key).search(key, vector, limit=limit, kind=kind, time_from=time_from,
                                           time_to=time_to, metadata=metadata, topics=topics,
                                           topics_match=topics_match)

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
        with self._rw.shared():
            return self._store(key).search_points(key, vector, limit=limit, kind=kind, time_from=time_from,
                                                  time_to=time_to, metadata=metadata, topics=topics,
                                                  topics_match=topics_match)

    def get_points(self, key: UserKey, pids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        with self._rw.shared():
            return self._store(key).get_points(key, pids)

    def scroll(self, key: UserKey | None = None, *, include_deleted: bool = True) -> Iterator[Entry]:
        """Every entry of ``key`` (or of every tier when ``key`` is None), in point-id order."""
        if key is not None:
            with self._rw.shared():
                store = self._store(key)
            return store.scroll(key, include_deleted=include_deleted)
        with self._rw.shared():
            stores, hidden = self._stores(), self._hidden_now()
        streams = [s.scroll(None, include_deleted=include_deleted) for s in stores]
        if hidden:
            streams[0] = (e for e in streams[0] if e.key not in hidden)
        return heapq.merge(*streams, key=lambda e: point_id(e.id)) if len(streams) > 1 else streams[0]

    def scroll_with_vectors(
        self, key: UserKey | None = None, *, include_deleted: bool = True
    ) -> Iterator[tuple[list[Entry], Vectors]]:
        """Pages of (entries, their vectors) of ``key`` (or of every tier, one after the other)."""
        with self._rw.shared():
            stores = [self._store(key)] if key is not None else self._stores()
            hidden = self._hidden_now() if key is None else set()
        for store in stores:
            for entries, vectors in store.scroll_with_vectors(key, include_deleted=include_deleted):
                if hidden and store is self.shared:
                    keep = [i for i, e in enumerate(entries) if e.key not in hidden]
                    entries, vectors = [entries[i] for i in keep], vectors[keep]
                if entries:
                    yield entries, vectors

    def count(self, key: UserKey | None = None, *, include_deleted: bool = False) -> int:
        with self._rw.shared():
            if key is not None:
                return self._store(key).count(key, include_deleted=include_deleted)
            stale = sum(self.shared.count(k, include_deleted=include_deleted) for k in self._hidden_now())
            return sum(s.count(None, include_deleted=include_deleted) for s in self._stores()) - stale

    def close(self) -> None:
        """Close every tier; a second close is a no-op."""
        with self._rw.exclusive():
            self._closed = True
            for tier in self._tiers.values():
                tier.store.close()
            self.shared.close()

    def __enter__(self) -> TieredEdgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ maintenance
    def candidates(self) -> list[UserKey]:
        """Users to promote (at least ``min_entries`` points in the shared store) or to rebuild (their store
        grew by ``rebuild_growth``), largest first."""
        if self.min_entries < 1:
            return []
        heavy = [k for k, _ in self.shared.heavy_users(self.min_entries) if k not in self._tiers]
        with self._rw.shared():
            grown = [(k, n) for k, t in self._tiers.items()
                     if (n := t.store.count(k, include_deleted=True)) >= t.built_points * (1 + self.rebuild_growth)]
        return heavy + [k for k, _ in sorted(grown, key=lambda kn: -kn[1])]

    def maintain(self) -> list[dict[str, Any]]:
        """Promote or rebuild every candidate, one build at a time; returns what each build did. Blocking:
        call it from a maintenance thread (reads and writes go on meanwhile)."""
        if not self._maintaining.acquire(blocking=False):
            return []
        try:
            return [self.build(key) for key in self.candidates()]
        finally:
            self._maintaining.release()

    def build(self, key: UserKey) -> dict[str, Any]:
        """Build (or rebuild) ``key``'s dedicated store off the shard's process and switch to it."""
        with self._rw.shared():
            old = self._tiers.get(key)
            source = old.store if old is not None else self.shared
        number = int(time.time() * 1000)
        directory = f"{_digest(key)}-{number}"
        staging = self.tiers_path / f"{STAGING_PREFIX}{directory}"
        target = self.tiers_path / directory
        with self._mutex:
            self._builds[key] = _Build()
        t0 = time.monotonic()
        try:
            exported = hnsw_build.export_user(source, key, staging)
            t_export = time.monotonic() - t0
            hnsw_build.run_build(staging, target, self.dim)
            t_build = time.monotonic() - t0 - t_export
            store = QdrantEdgeStore(target, self.dim, shard=self._shard_label)
        except BaseException:
            with self._mutex:
                self._builds.pop(key, None)
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(target, ignore_errors=True)
            raise
        shutil.rmtree(staging, ignore_errors=True)
        t1 = time.monotonic()
        with self._rw.exclusive():
            with self._mutex:
                build = self._builds.pop(key)
            current = self._tiers.get(key)
            if self._closed or build.cleared or current is not old:
                store.close()  # closed, or the user was erased or rebuilt meanwhile: nothing to switch to
                shutil.rmtree(target, ignore_errors=True)
                return {"app": key.app, "user": key.user, "switched": False}
            try:
                caught = hnsw_build.catch_up(source, store, key, sorted(build.changed))
                self._tiers[key] = _Tier(key, directory, exported + caught, store)
                self._write_manifest(list(self._tiers.values()))
            except BaseException:  # the manifest does not name the new store: the source still serves
                self._tiers.pop(key, None)
                if old is not None:
                    self._tiers[key] = old
                store.close()
                shutil.rmtree(target, ignore_errors=True)
                raise
            if old is None:
                self._hidden.add(key)  # its copy in the shared store goes next, outside the lock
            else:
                old.store.close()
        frozen = time.monotonic() - t1
        if old is None:
            self.shared.delete_user(key)
            with self._mutex:
                self._hidden.discard(key)
        else:
            shutil.rmtree(self.tiers_path / old.directory, ignore_errors=True)
        labels = {"shard": "-" if self._shard_label is None else str(self._shard_label)}
        telemetry.observe("memcluster_vector_tier_build_ms", (time.monotonic() - t0) * 1000, **labels)
        log.info("vector store %s: %s store of %s/%s built (%d points; export %.1fs, build %.1fs, switch %.3fs)",
                 self.path, "rebuilt" if old else "dedicated", key.app, key.user, exported, t_export, t_build, frozen)
        return {"app": key.app, "user": key.user, "switched": True, "rebuilt": old is not None,
                "points": exported, "caught_up": caught, "export_s": round(t_export, 3),
                "build_s": round(t_build, 3), "switch_s": round(frozen, 4)}
