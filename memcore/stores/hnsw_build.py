"""The build of a dedicated vector store (:mod:`memcore.stores.edge_tiers`): the shard's side exports a user's
points (:func:`export_user`), runs this module as a process of its own (:func:`run_build`), and copies again
what was written meanwhile (:func:`catch_up`); the process (:func:`build`) loads the points into a new
Qdrant Edge store and builds its HNSW index, so that the engine's optimizer (which holds the GIL while it
runs) never stops the shard.

    python -m memcore.stores.hnsw_build <staging dir> <target dir> <dim>

Prints one JSON line (points, seconds) and exits 0; any failure exits non-zero with the error on stderr,
and the half-built target is the caller's to delete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memcore.errors import StoreError
from memcore.model import Entry, UserKey
from memcore.stores.qdrant_edge import QdrantEdgeStore

PAGE = 1024
EXPORT_PAGE, EXPORT_YIELD = 32, 8
"""An export runs on the shard's process beside its searches, holding the GIL while it converts points: it
reads ``EXPORT_PAGE`` points per engine call and lets other threads in after each call and after every
``EXPORT_YIELD`` entries it writes, so a search waits a fraction of a millisecond for it, not a page."""
ENTRIES_FILE, VECTORS_FILE = "entries.jsonl", "vectors.npy"
"""The staging directory of a build: the user's entries as JSON lines, their vectors as one matrix."""
BUILD_TIMEOUT_S = 3600.0
INDEX_FROM_KB = 1
"""Index every segment: a dedicated store exists because its user is large (the engine's default, 10 MB of
vectors, would leave a store of 6,000 384-dimension points plain)."""
NICENESS = 10
"""The build lowers its own scheduling priority: the shard's threads come first on a busy machine."""


def lower_priority() -> None:
    """Run this process (and the engine's threads it starts) only on CPU time the shard leaves: the idle
    scheduling class where the platform has it (a shard's thread that wakes preempts it at once), else a
    lower nice value."""
    if hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass
    os.nice(NICENESS)


def build_threads() -> int:
    """Threads of an HNSW build: every CPU this process may use but one, which the shard keeps; at least one
    (docs/benchmarks.md, "Scale": what the build costs other users' searches)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def build(staging: Path, target: Path, dim: int) -> dict[str, float]:
    """Load ``staging`` (entries.jsonl + vectors.npy, as :func:`export_user` wrote them) into a new store at
    ``target`` and optimize it (HNSW build); returns what it did."""
    t0 = time.monotonic()
    vectors = np.load(staging / VECTORS_FILE)
    with (staging / ENTRIES_FILE).open(encoding="utf-8") as fh:
        entries = [Entry.model_validate_json(line) for line in fh if line.strip()]
    if len(entries) != len(vectors):
        raise ValueError(f"{staging}: {len(entries)} entries but {len(vectors)} vectors")
    with QdrantEdgeStore(target, dim, indexing_threshold_kb=INDEX_FROM_KB, indexing_threads=build_threads()) as store:
        for i in range(0, len(entries), PAGE):
            store.upsert(entries[i:i + PAGE], vectors[i:i + PAGE])
        t_load = time.monotonic() - t0
        store.optimize()
    return {"points": len(entries), "threads": build_threads(), "load_s": round(t_load, 3),
            "total_s": round(time.monotonic() - t0, 3)}


def export_user(source: QdrantEdgeStore, key: UserKey, staging: Path) -> int:
    """Write ``key``'s points (tombstones included) to ``staging``: entries as JSON lines, vectors as one
    ``.npy`` matrix in the same order. Each page is one short call on the store."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pages: list[npt.NDArray[np.float32]] = []
    count = 0
    with (staging / ENTRIES_FILE).open("w", encoding="utf-8") as fh:
        for entries, vectors in source.scroll_with_vectors(key, include_deleted=True, page=EXPORT_PAGE):
            time.sleep(0)  # let searches in: after the page's call, and every few entries written
            for i, e in enumerate(entries, 1):
                fh.write(e.model_dump_json() + "\n")
                if i % EXPORT_YIELD == 0:
                    time.sleep(0)
            pages.append(np.asarray(vectors, dtype=np.float32))
            count += len(entries)
    np.save(staging / VECTORS_FILE, np.concatenate(pages) if pages else np.zeros((0, source.dim), np.float32))
    return count


def run_build(staging: Path, target: Path, dim: int) -> None:
    """Run the build process (``memcore.stores.hnsw_build``) and wait for it without holding the GIL."""
    import memcore

    root = str(Path(memcore.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "memcore.stores.hnsw_build", str(staging), str(target), str(dim)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StoreError(f"building {target} took over {BUILD_TIMEOUT_S:.0f} s", field="path") from exc
    if done.returncode != 0:
        raise StoreError(f"building {target} failed: {done.stderr.strip()[-2000:]}", field="path")


def catch_up(source: QdrantEdgeStore, target: QdrantEdgeStore, key: UserKey, ids: Sequence[str]) -> int:
    """Copy the ids written during the build again from ``source`` (or delete them from ``target`` when
    ``source`` no longer has them); returns how many were copied."""
    if not ids:
        return 0
    entries, vectors = source.get_with_vectors(key, ids)
    present = {e.id for e in entries}
    target.upsert(entries, vectors)
    target.delete(key, [i for i in ids if i not in present])
    return len(entries)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or not args[2].isdigit():
        print("usage: python -m memcore.stores.hnsw_build <staging dir> <target dir> <dim>", file=sys.stderr)
        return 2
    lower_priority()
    print(json.dumps(build(Path(args[0]), Path(args[1]), int(args[2]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
