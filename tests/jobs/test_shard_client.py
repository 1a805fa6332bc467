"""The jobs' blocking shard client: attached to the running shards only, reads retried across a restart,
writes through the user's FIFO like every other caller."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from actors.router import ClusterNotRunning
from jobs.common import cluster_shards
from memcore.errors import ValidationError
from memcore.model import UserKey
from memcore.settings import Settings

pytestmark = pytest.mark.ray


def test_a_job_never_creates_shards(ray_session: Any, tmp_path: Any) -> None:
    settings = Settings.model_validate({"data_dir": tmp_path, "shards": 1,
                                        "namespace": f"nobody-{uuid.uuid4().hex[:8]}"})
    with pytest.raises(ClusterNotRunning, match="shard-0"):
        cluster_shards(settings).ping(0)
    import ray

    with pytest.raises(ValueError):  # nothing was started in its place
        ray.get_actor("shard-0", namespace=settings.namespace)


def test_a_read_is_retried_while_the_shard_restarts(make_cluster: Any) -> None:
    cluster = make_cluster(shards=1)
    shards = cluster_shards(cluster.settings)
    pid = cluster.ray.get(cluster.handles[0].status.remote())["pid"]
    assert shards.generation_info(0)["current"] == 1
    cluster.ray.kill(cluster.handles[0], no_restart=False)  # Ray restarts it under the same name
    assert shards.generation_info(0)["current"] == 1  # waited for the new incarnation instead of failing
    assert asyncio.run(cluster.backend.call_shard(0, "status"))["pid"] != pid  # (the router's read, retried)


def test_backfill_writes_are_sent_at_once_and_awaited_later(make_cluster: Any) -> None:
    cluster = make_cluster()
    shards = cluster_shards(cluster.settings)
    key = UserKey(app="shop", user="ann")
    events = [{"id": "e1", "role": "user", "content": "Ann buys green tea", "timestamp": "2024-03-01T10:00:00Z"}]
    pending = shards.backfill(key, [("s1", events)], [{"text": "Ann buys green tea", "provenance": ["e1"]}])
    done, seq = pending.result()
    assert done["entries_new"] == 1 and seq == 1  # the first write in the user's FIFO
    assert [e.text for e in cluster.read("shop", "ann")] == ["Ann buys green tea"]
    with pytest.raises(ValidationError, match="one vector per memory"):  # the shard's error, as its type
        shards.backfill(key, [], [{"text": "x"}], [[0.0] * 64, [0.0] * 64]).result()
