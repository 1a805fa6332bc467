"""Multi-node for real: each simulated node has its own local data root, the archive lives in PostgreSQL,
and a worker node is removed in the middle of an ingest burst with extraction jobs queued
(:mod:`tests.cluster.multinode_pg_scenario`, in a subprocess with its own Ray cluster).

What is shown: the shards of the lost node restart on the surviving nodes, in those nodes' own
directories (the lost node's directory is wiped), take the shard lease with the next epoch, rebuild
their keyword index, and run the jobs the lost incarnation left queued or unfinished; every
acknowledged turn is archived and extracted into exactly one memory, none is extracted twice (no memory
rewritten, no extra), each user's turns are archived in the order sent and its jobs finished in order;
the time until the moved shards answer again is measured. A job the lost incarnation was running may be
recorded ``failed`` (its node's disk went under it): its turns stay unextracted and the session's next
job extracts them, which the memories show. No archive file is on any node.

Shared path: no Qdrant server can run here, so the shards' Qdrant Edge directories are under
``shared_vectors_dir``, one path every simulated node sees (on real machines a shared volume, or the
Qdrant server backend); everything else the moved shards find comes from PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import pg_schema

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("multinode-pg")
    ray_tmp = tempfile.mkdtemp(prefix="mp", dir="/tmp")  # short: Ray's socket paths live under it
    out = work / "result.json"
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.cluster.multinode_pg_scenario", str(out), str(work), postgres_server.dsn,
             pg_schema()], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        data = json.loads(out.read_text()) if out.exists() else {}
        assert proc.returncode == 0 and "error" not in data, (data.get("traceback"), proc.stderr[-4000:])
        yield data
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_each_node_keeps_its_shards_in_its_own_directory(result: dict[str, Any]) -> None:
    dirs = result["node_dirs"]
    for k, node in result["placement_before"].items():
        assert result["data_dir_before"][k] == dirs[node]
    for k, node in result["placement_after"].items():
        assert result["final_status"][k]["data_dir"] == dirs[node]
    assert result["sqlite_files"] == [] and result["vectors_on_node_disks"] == []


def test_the_lost_nodes_shards_come_back_elsewhere_with_the_next_lease(result: dict[str, Any]) -> None:
    victim, victims = result["victim_node"], [str(k) for k in result["victim_shards"]]
    assert victims and victim not in result["alive_nodes"]
    assert result["backlog_at_removal"] > 0  # the lost shards had extraction jobs queued or running
    for k, node in result["placement_after"].items():
        final = result["final_status"][k]
        if k in victims:
            assert node != victim and node in result["alive_nodes"] and result["restarts"][k] == 1
            status = result["victim_status"][k]
            assert status["lease_epoch"] == 2 and status["rebuilt_on_start"]
            assert status["data_dir"] != result["node_dirs"][victim]
        else:
            assert node == result["placement_before"][k] and final["lease_epoch"] == 1
        assert final["keyword_docs"] == final["entries"] > 0
    assert 0 < result["recovered_s"] < 60


def test_nothing_acknowledged_is_lost_nor_extracted_twice_and_order_holds(result: dict[str, Any]) -> None:
    assert result["unexpected"] == []
    moved = {u for u, k in result["user_shards"].items() if k in result["victim_shards"]}
    assert moved
    for user, r in result["users"].items():
        assert r["acked"] >= 3 * 3, user
        assert r["lost_events"] == [] and r["unsent_events"] == [] and r["order_kept"], (user, r)
        assert r["lost_memories"] == [] and r["extra_memories"] == [], (user, r)
        assert r["entries"] == r["distinct_texts"] == r["arrived"] and r["rewritten"] == 0, (user, r)
        assert r["jobs_in_order"] and r["last_job_done"], (user, r)
        for status, code, _ in r["not_done"]:
            # a turn resent after a lost acknowledgement: its job finds nothing new; a job of the lost
            # incarnation that failed, or failed part of its operations (``partial``), as its node's disk went:
            # the session's next job extracted its turns (nothing is lost: asserted above)
            lost_incarnation = status in ("failed", "partial") and user in moved
            assert (status, code) == ("skipped", "nothing_new") or lost_incarnation, (user, user in moved, r)
