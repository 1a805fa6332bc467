"""``memctl status``'s operations rows from real shard statuses: queue depth, running jobs, cursor lag
(an archive_only app leaves its turns unextracted, so the lag grows) and job counters."""

from __future__ import annotations

import time
from pathlib import Path

from actors.shard import ShardCore
from cluster.status_summary import summarize
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.stores.embedders import HashingEmbedder


def test_rows_carry_queue_lag_and_job_counters(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, shards=1, memory={"apps": {"arch": {"memory": "archive_only"}}})
    core = ShardCore(settings, 0, HashingEmbedder(dim=64))
    try:
        sent = time.time()
        job = core.ingest(UserKey(app="arch", user="u1"), "s1", [{"role": "user", "content": "I like tea."}])
        assert job.status == "skipped"
        rows = summarize({"shards": [core.status()]}, now=sent + 100)
    finally:
        core.close()
    assert rows == [{"shard": 0, "entries": 0, "queue_depth": 0, "running": 0, "cursor_lag_s": rows[0]["cursor_lag_s"],
                     "jobs": {"skipped": 1}, "rebuilt_on_start": None}]
    assert 99.0 <= rows[0]["cursor_lag_s"] <= 101.0
    assert summarize(None) == [] and summarize({"status": "ready"}) == []
