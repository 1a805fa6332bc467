"""Crash-safe rotation: a process killed (``os._exit``, no cleanup) at any store write of a rotating
update leaves, once the stores are reopened and :meth:`MemoryService.finish_rotations` has run,
exactly one active entry for the memory: the old one or the new one, never both, never none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memcore.model import UserKey
from memcore.service import MemoryService
from memcore.settings import ServiceConfig
from memcore.stores.embedders import HashingEmbedder
from memcore.stores.tantivy_index import TantivyIndex

KEY = UserKey(app="app", user="u1")
OLD_TEXT = "I live in Lisbon near the river"
NEW_TEXT = "I live in Porto near the sea"

# The child: opens the stores, adds the old memory, then runs a rotating update whose
# ``kill_at``-th vector-store write (counted from the start of the update) kills the process
# before it happens (kill_at = 0: the update completes).
CHILD = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from qdrant_client import QdrantClient
    from memcore.model import UserKey
    from memcore.service import MemoryService
    from memcore.settings import ServiceConfig
    from memcore.stores.embedders import HashingEmbedder
    from memcore.stores.tantivy_index import TantivyIndex

    root, backend, soft, kill_at = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    emb = HashingEmbedder(dim=64)
    if backend == "edge":
        from memcore.stores.qdrant_edge import QdrantEdgeStore
        vectors = QdrantEdgeStore(root / "vectors", emb.dim)
    else:
        from memcore.stores.qdrant import QdrantServerStore
        vectors = QdrantServerStore(QdrantClient(path=str(root / "qdrant")), "memories", emb.dim, owns_client=True)
    svc = MemoryService(vectors, TantivyIndex(root / "keywords"), emb, ServiceConfig(soft_delete=soft))
    key = UserKey(app="app", user="u1")
    old = svc.add(key, {"text": sys.argv[5], "topics": ["home"]})
    print(json.dumps({"old": old.id}), flush=True)
    writes = 0
    for name in ("upsert", "set_payload", "delete"):
        real = getattr(vectors, name)
        def wrapped(*args, _real=real, **kwargs):
            global writes
            writes += 1
            if writes == kill_at:
                os._exit(9)
            return _real(*args, **kwargs)
        setattr(vectors, name, wrapped)
    new = svc.update(key, old.id, {"text": sys.argv[6]})
    print(json.dumps({"new": new.id}), flush=True)
    os._exit(0)
    """
)


def _run_child(root: Path, backend: str, soft: bool, kill_at: int) -> tuple[int, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), backend, "1" if soft else "0", str(kill_at), OLD_TEXT, NEW_TEXT],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    ids: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        ids.update(json.loads(line))
    assert "old" in ids, proc.stderr
    return proc.returncode, ids


def _reopen(root: Path, backend: str, soft: bool) -> MemoryService:
    emb = HashingEmbedder(dim=64)
    if backend == "edge":
        from memcore.stores.qdrant_edge import QdrantEdgeStore

        vectors = QdrantEdgeStore(root / "vectors", emb.dim)
    else:
        from qdrant_client import QdrantClient

        from memcore.stores.qdrant import QdrantServerStore

        vectors = QdrantServerStore(QdrantClient(path=str(root / "qdrant")), "memories", emb.dim, owns_client=True)
    return MemoryService(vectors, TantivyIndex(root / "keywords"), emb, ServiceConfig(soft_delete=soft))


# A rotating update makes three vector-store writes: the new entry (marked), the old one retired,
# the mark cleared. kill_at 1..3 dies before each of them, 0 lets the update finish.
@pytest.mark.parametrize("backend", ["edge", "local"])
@pytest.mark.parametrize("soft", [True, False], ids=["soft", "hard"])
@pytest.mark.parametrize("kill_at", [1, 2, 3, 0])
def test_killed_rotation_restarts_with_exactly_one_active_entry(
    tmp_path: Path, backend: str, soft: bool, kill_at: int
) -> None:
    code, ids = _run_child(tmp_path, backend, soft, kill_at)
    assert code == (9 if kill_at else 0)
    assert ("new" in ids) == (kill_at == 0)
    svc = _reopen(tmp_path, backend, soft)
    try:
        finished = svc.finish_rotations()
        assert finished == (1 if kill_at in (2, 3) else 0)
        active = svc.read(KEY)
        assert len(active) == 1, [e.text for e in active]
        expected = OLD_TEXT if kill_at == 1 else NEW_TEXT
        assert active[0].text == expected
        assert active[0].topics == ["home"]  # carried over by the rotation
        assert active[0].replaces is None
        assert "replaces" not in active[0].model_dump()
        # The keyword index agrees once rebuilt or repaired: the one active entry only.
        hits = svc.search(KEY, {"query": "live near", "similarity_threshold": -1.0})
        assert [h.entry.id for h in hits] == [active[0].id]
        # Nothing is left to finish; a second run is a no-op.
        assert svc.finish_rotations() == 0
        # The entry is usable again: another update rotates cleanly.
        again = svc.update(KEY, active[0].id, {"text": "I live in Faro"})
        assert [e.id for e in svc.read(KEY)] == [again.id]
    finally:
        svc.vectors.close()
        svc.keywords.close()
