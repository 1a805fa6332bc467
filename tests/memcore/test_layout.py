"""Where a shard's directories are: the node-local data root a node names (``MEMCLUSTER_NODE_DATA_DIR``)
and the Qdrant Edge directories under ``shared_vectors_dir``."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.layout import ShardLayout
from memcore.settings import NODE_DATA_DIR_ENV, Settings


def test_a_node_names_its_local_data_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    given = Settings(data_dir=tmp_path / "driver")
    monkeypatch.delenv(NODE_DATA_DIR_ENV, raising=False)
    assert given.on_this_node() is given
    monkeypatch.setenv(NODE_DATA_DIR_ENV, str(tmp_path / "node-a"))
    local = given.on_this_node()
    assert local.data_dir == tmp_path / "node-a" and given.data_dir == tmp_path / "driver"
    assert ShardLayout(local, 3).root == tmp_path / "node-a" / "shards" / "0003"


def test_vectors_can_live_on_a_shared_path_and_the_rest_stays_local(tmp_path: Path) -> None:
    local = ShardLayout(Settings(data_dir=tmp_path / "node"), 2)
    assert local.vectors_dir(1) == tmp_path / "node" / "shards" / "0002" / "vectors"
    shared = ShardLayout(Settings(data_dir=tmp_path / "node", shared_vectors_dir=tmp_path / "nfs"), 2)
    assert shared.vectors_dir(1) == tmp_path / "nfs" / "shards" / "0002" / "vectors"
    assert shared.vectors_dir(3) == tmp_path / "nfs" / "shards" / "0002" / "gen-0003" / "vectors"
    assert shared.keywords_dir(1) == tmp_path / "node" / "shards" / "0002" / "keywords"
    assert shared.dirty_marker.parent == shared.root == tmp_path / "node" / "shards" / "0002"
    shared.vectors_dir(3).mkdir(parents=True)
    shared.wipe(3)
    assert not shared.vectors_dir(3).exists()
