"""The stores of a re-shard (:mod:`cluster.reshard`): an old shard read whole, the new shards written in groups
of users, and the totals both sides are checked by."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np

from memcore import factory
from memcore.archive_ports import EventArchive
from memcore.data_root import fsync_dir
from memcore.ids import shard_of
from memcore.layout import ShardLayout
from memcore.model import Entry, UserKey
from memcore.ports import Vectors, VectorStore
from memcore.records import UserRows

GROUP_ENTRIES, GROUP_USERS = 2_000, 256
"""A group of users (about this many entries, at most this many users): what one flush of each target store,
one archive transaction per target and one fsync of the progress log cover."""


def groups(keys: list[UserKey], src: SourceShard) -> Iterator[list[UserKey]]:
    """Users in groups of about :data:`GROUP_ENTRIES` entries (at most :data:`GROUP_USERS` users): what one
    flush of each target store, one archive transaction and one fsync of the progress log cover."""
    group: list[UserKey] = []
    size = 0
    for key in keys:
        group.append(key)
        size += src.vectors.count(key, include_deleted=True) if src.vectors is not None else 0
        if size >= GROUP_ENTRIES or len(group) >= GROUP_USERS:
            yield group
            group, size = [], 0
    if group:
        yield group


def repaged(pages: list[tuple[list[Entry], Vectors]]) -> Iterator[tuple[list[Entry], Vectors]]:
    """The pages of several users as pages of at most :data:`GROUP_ENTRIES` rows."""
    entries: list[Entry] = []
    vectors: list[Vectors] = []
    for page, rows in pages:
        entries += page
        vectors.append(rows)
        if len(entries) >= GROUP_ENTRIES:
            yield entries, np.concatenate(vectors)
            entries, vectors = [], []
    if entries:
        yield entries, np.concatenate(vectors)


class Tally:
    """What a set of shards holds: users, entries (tombstones included), archived turns, jobs."""

    def __init__(self) -> None:
        self.keys: set[UserKey] = set()
        self.per_shard: list[int] = []
        self.turns = self.jobs = 0

    def add(self, vectors: VectorStore | None, archive: EventArchive, keys: list[UserKey]) -> None:
        self.keys |= set(keys)
        self.per_shard.append(vectors.count(None, include_deleted=True) if vectors is not None else 0)
        self.turns += archive.events.count()
        self.jobs += sum(archive.jobs.counts().values())

    def counts(self) -> dict[str, int]:
        return {"users": len(self.keys), "entries": sum(self.per_shard), "turns": self.turns, "jobs": self.jobs}



class SourceShard:
    """One shard's stores opened for reading (its serving generation's vectors; None without a store)."""

    def __init__(self, layout: ShardLayout) -> None:
        from memcore.stores.edge_compaction import stored_dim

        self.layout = layout
        generation = factory.current_generation(layout)
        dim = stored_dim(layout.vectors_dir(generation))
        self.vectors: VectorStore | None = (factory.build_vector_store(layout, dim, generation)
                                            if dim is not None else None)
        self.archive: EventArchive = factory.build_archive(layout)

    def keys(self) -> list[UserKey]:
        found = set(self.archive.keys())
        if self.vectors is not None:
            found |= {e.key for e in self.vectors.scroll(None, include_deleted=True)}
        return sorted(found, key=lambda k: (k.app, k.user))

    def pages(self, key: UserKey) -> Iterator[Any]:
        if self.vectors is not None:
            yield from self.vectors.scroll_with_vectors(key, include_deleted=True)

    def __enter__(self) -> SourceShard:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.vectors is not None:
            self.vectors.close()
        self.archive.close()


class TargetShards:
    """The M new shards' stores, opened when first written."""

    def __init__(self, target: int, layout: Callable[[int], ShardLayout], stack: ExitStack, *, clean: bool) -> None:
        self.target = target
        self.layout = layout
        """The layout of new shard k (in the work directory)."""
        self.stack = stack
        self.clean = clean
        """A resumed run: a user's target may hold part of it already (replaced, not merged)."""
        self.vectors: dict[int, VectorStore] = {}
        self.archives: dict[int, EventArchive] = {}
        for k in range(target):
            shard = layout(k)
            shard.root.mkdir(parents=True, exist_ok=True)
            self.archives[k] = archive = factory.build_archive(shard)
            stack.callback(archive.close)
        fsync_dir(layout(0).root.parent)

    def _vectors(self, k: int, dim: int) -> VectorStore:
        if k not in self.vectors:
            self.vectors[k] = store = factory.build_vector_store(self.layout(k), dim)
            self.stack.callback(store.close)
        return self.vectors[k]

    def put(self, group: list[UserKey], src: SourceShard) -> None:
        """Write every user of ``group`` into its new shard: one upsert per page of each target, one archive
        transaction per target; durable (flushed, committed) when it returns."""
        pages: dict[int, list[tuple[list[Entry], Vectors]]] = {}
        rows: dict[int, list[UserRows]] = {}
        for key in group:
            k = shard_of(key, self.target)
            pages.setdefault(k, []).extend(src.pages(key))
            rows.setdefault(k, []).append(src.archive.export_user(key))
        for k, found in pages.items():
            if not found or src.vectors is None:
                continue
            dst = self._vectors(k, src.vectors.dim)
            if self.clean:  # a run cut short may have written part of these users: replace, never merge
                for key in group:
                    if shard_of(key, self.target) == k and dst.count(key, include_deleted=True):
                        dst.delete_user(key)
            for entries, vectors in repaged(found):
                dst.upsert(entries, vectors)
        for k, user_rows in rows.items():
            self.archives[k].import_users(user_rows)

    def _on_disk(self) -> None:
        """Open every new shard's vector store on disk (a resumed run may not have written to some)."""
        from memcore.stores.edge_compaction import stored_dim

        for k in range(self.target):
            dim = stored_dim(self.layout(k).vectors_dir())
            if dim is not None:
                self._vectors(k, dim)

    def tally(self) -> Tally:
        """What the new shards hold (every one with a store on disk, written in this run or before)."""
        self._on_disk()
        tally = Tally()
        for k, archive in self.archives.items():
            store = self.vectors.get(k)
            keys = set(archive.keys()) | ({e.key for e in store.scroll(None)} if store is not None else set())
            tally.add(store, archive, sorted(keys, key=lambda key: (key.app, key.user)))
        return tally

    def reindex(self) -> None:
        self._on_disk()
        for k, store in self.vectors.items():
            layout = self.layout(k)
            keywords = factory.build_keyword_index(layout)
            try:
                layout.reindex(store, keywords)
            finally:
                keywords.close()
