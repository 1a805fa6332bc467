"""memctl backfill / reextract against a cluster `memctl up` started (a LoCoMo slice, hashing embedder).

The slowest test of the suite (about 2-3 minutes: a Ray head, the Serve app and two Ray Data jobs
in subprocesses); each memctl call has a 10-minute limit so a loaded machine slows it, not fails it.
The verbatim granularity is pinned to ``turn`` so one entry maps to one LoCoMo turn.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from memcore.provenance import event_ref
from tests.cluster.test_memctl import memctl
from tests.conftest import free_port

pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not DATA.exists(), reason="LoCoMo-10 is not in ../shared/data")
def test_backfill_search_reextract_drop(tmp_path: Path) -> None:
    sample = json.loads(DATA.read_text())[0]
    conv = {k: v for k, v in sample["conversation"].items() if not k.startswith("session_")
            or k.split("_")[1] in ("1", "2")}
    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps([{**sample, "conversation": conv}]))
    turns = len(conv["session_1"]) + len(conv["session_2"])
    port, ray_port = free_port(), free_port()
    env = {**os.environ, "MEMCTL_STATE": str(tmp_path / "state.json"), "MEMCLUSTER_EMBEDDER__KIND": "hashing",
           "MEMCLUSTER_SHARDS": "2", "MEMCLUSTER_EXTRACTOR__GRANULARITY": "turn",
           "MEMCLUSTER_EXTRACTOR__BACKFILL_GRANULARITY": "turn",
           "RAY_USAGE_STATS_ENABLED": "0"}
    up = memctl("up", "--data-dir", str(tmp_path / "data"), "--port", str(port), "--ray-port", str(ray_port),
                "--num-cpus", "2", "--timeout", "400", env=env, timeout=600)
    search = f"http://127.0.0.1:{port}/v1/apps/locomo/users/{sample['sample_id']}/memories/search"
    first = conv["session_1"][0]
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        backfill = ("backfill", "--locomo", str(tiny), "--app", "locomo", "--json", "--progress-s", "0")
        bf = memctl(*backfill, env=env, timeout=600)
        assert bf.returncode == 0, bf.stdout + bf.stderr
        summary = json.loads(bf.stdout[bf.stdout.index("{"):])
        assert summary["turns"] == turns and summary["entries_new"] == turns
        hit = httpx.post(search, json={"query": first["text"]}).json()["hits"][0]["entry"]
        assert hit["provenance"] == [event_ref("session_1", first["dia_id"])]
        again = memctl(*backfill, env=env, timeout=600)
        assert again.returncode == 0 and json.loads(again.stdout[again.stdout.index("{"):])["entries_new"] == 0

        rx = memctl("reextract", "--granularity", "session", "--progress-s", "0", env=env, timeout=600)
        assert rx.returncode == 0 and "reads switched to generation 2" in rx.stdout, rx.stdout + rx.stderr
        hit = httpx.post(search, json={"query": first["text"]}).json()["hits"][0]["entry"]
        assert hit["provenance"][0] == event_ref("session_1", first["dia_id"])
        assert len(hit["provenance"]) == len(conv["session_1"])
        drop = memctl("reextract", "--drop-generation", "1", env=env)
        assert drop.returncode == 0, drop.stdout + drop.stderr
        listed = memctl("reextract", "--list", env=env)
        assert all(json.loads(line)["generations"] == [2] for line in listed.stdout.splitlines())
    finally:
        memctl("down", env=env)
