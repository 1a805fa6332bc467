"""Compaction of a Qdrant Edge shard directory (:mod:`memcore.stores.qdrant_edge`): every stored point (tombstones
included) is copied with its vector into a fresh directory beside it, which then replaces it with two fsynced
renames; a crash between them is repaired before the directory is opened again. Deleted points, the old
write-ahead log and old payload pages do not survive (Qdrant Edge keeps them otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from memcore.model import Entry
from memcore.ports import Vectors
from memcore.stores.qdrant_edge import QdrantEdgeStore

#: Beside ``<dir>``: the fresh copy being written, and the old directory between the two renames.
COMPACT_SUFFIX, OLD_SUFFIX = ".compact", ".old"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def stored_dim(path: str | Path) -> int | None:
    """The vector size of the shard directory ``path`` as the engine recorded it (None: no shard there), so
    that an offline tool opens it without building the embedder."""
    try:
        config = json.loads((Path(path) / "edge_config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return int(config["vectors"][""]["size"])


def recover_compaction(path: str | Path) -> None:
    """Finish or undo a compaction of ``path`` that a crash interrupted (call before opening ``path``):
    a half-written copy is deleted; an old directory whose replacement is in place is deleted, one
    whose replacement is missing is moved back."""
    path = Path(path)
    shutil.rmtree(_sibling(path, COMPACT_SUFFIX), ignore_errors=True)
    old = _sibling(path, OLD_SUFFIX)
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, path)


def write_fresh(path: str | Path, dim: int, pages: Iterable[tuple[Sequence[Entry], Vectors]]) -> int:
    """Write ``pages`` of (entries, vectors) into a fresh shard directory beside ``path`` (the first step of
    a compaction; ``path`` may stay open meanwhile); returns the points written."""
    fresh = _sibling(Path(path), COMPACT_SUFFIX)
    shutil.rmtree(fresh, ignore_errors=True)
    copied = 0
    with QdrantEdgeStore(fresh, dim) as dst:
        for entries, vectors in pages:
            dst.upsert(entries, vectors)
            copied += len(entries)
    return copied


def swap_in(path: str | Path) -> None:
    """Replace the (closed) directory ``path`` with the fresh copy :func:`write_fresh` wrote: two renames,
    fsynced (:func:`recover_compaction` repairs a crash between them), then the old directory is deleted."""
    path = Path(path)
    fresh, old = _sibling(path, COMPACT_SUFFIX), _sibling(path, OLD_SUFFIX)
    os.replace(path, old)
    os.replace(fresh, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    shutil.rmtree(old)


def compact_dir(path: str | Path, dim: int) -> int:
    """Rewrite the (closed) shard directory ``path`` with only its stored points: every point (tombstones
    included) is copied with its vector into a fresh directory, which then replaces ``path``. Deleted
    points, the old write-ahead log and payload pages do not survive. Returns the points copied."""
    path = Path(path)
    recover_compaction(path)
    if not path.exists():
        return 0
    with QdrantEdgeStore(path, dim) as src:
        copied = write_fresh(path, dim, src.scroll_with_vectors(None, include_deleted=True))
    swap_in(path)
    return copied
