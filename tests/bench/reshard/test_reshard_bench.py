"""The re-shard benchmark at a tiny size: its data directory is what it says, and its report is written."""

from __future__ import annotations

import json
from pathlib import Path

from bench.reshard.run import build, main
from cluster.reshard import Reshard
from memcore.data_root import DataRoot
from tests.cluster.test_reshard import snapshot


def test_the_built_directory_moves_whole(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data, 2, entries=60, users=3, dim=16)
    before = snapshot(data, 2)
    assert len(before) == 3 and sum(len(v["entries"]) for v in before.values()) == 60
    from bench.reshard.run import settings_of

    summary = Reshard(settings_of(data, 2), 3).run()
    assert (summary.users, summary.entries, summary.turns, summary.jobs) == (3, 60, 60, 3)
    assert DataRoot(data).recorded() == 3 and snapshot(data, 3) == before


def test_report(tmp_path: Path) -> None:
    out = tmp_path / "reshard.json"
    assert main(["--entries", "40", "--users", "2", "--dim", "8", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [(r["from"], r["to"]) for r in data["runs"]] == [(4, 6), (6, 3), (3, 4)]
    assert all(r["entries"] == 40 and r["s_per_100k_entries"] > 0 for r in data["runs"])
    assert data["s_per_100k_entries"]["min"] <= data["s_per_100k_entries"]["mean"] <= data["s_per_100k_entries"]["max"]
    assert out.with_suffix(".md").read_text().count("→") == 3 and out.with_suffix(".png").stat().st_size > 0
