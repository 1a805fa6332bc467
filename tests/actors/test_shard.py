from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from actors.shard import Ack, ShardCore, UserQueues
from memcore.errors import NotFoundError
from memcore.layout import ShardLayout
from memcore.model import UserKey
from memcore.settings import Settings

A = UserKey(app="app", user="alice")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64})


@pytest.fixture
def core(settings: Settings, hashing_embedder) -> ShardCore:  # type: ignore[no-untyped-def]
    c = ShardCore(settings, 0, hashing_embedder)
    yield c
    c.close()


def test_user_queue_is_fifo_in_arrival_order() -> None:
    q = UserQueues()
    order: list[int] = []
    gate = threading.Event()
    started: list[threading.Event] = []

    def writer(i: int) -> None:
        with q.turn(A) as seq:
            if i == 0:
                gate.wait(2)
            order.append(seq)

    threads = []
    for i in range(20):
        ev = threading.Event()
        started.append(ev)
        t = threading.Thread(target=writer, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.005)  # arrival order = start order
    gate.set()
    for t in threads:
        t.join(5)
    assert order == list(range(1, 21))
    assert q.pending() == 0


def test_concurrent_writes_of_one_user_apply_in_fifo_order(core: ShardCore) -> None:
    acks: list[Ack] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        ack = core.add(A, {"text": f"event number {i}"})
        with lock:
            acks.append(ack)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(a.seq for a in acks) == list(range(1, 51))
    by_seq = sorted(acks, key=lambda a: a.seq)
    times = [a.value.updated_at for a in by_seq]
    assert times == sorted(times) and len(set(times)) == 50  # applied one by one, in FIFO order
    assert len(core.read(A)) == 50


def test_reads_are_served_while_a_write_waits(core: ShardCore) -> None:
    core.add(A, {"text": "already here"})
    release = threading.Event()
    holder = threading.Thread(target=lambda: _hold_turn(core, release))
    holder.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    assert [e.text for e in core.read(A)] == ["already here"]
    assert core.search(A, {"query": "already"})
    assert time.monotonic() - t0 < 1.0
    release.set()
    holder.join(5)


def _hold_turn(core: ShardCore, release: threading.Event) -> None:
    with core._queues.turn(A):
        release.wait(5)


def test_restart_rebuilds_missing_keyword_index(settings: Settings, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    c = ShardCore(settings, 0, hashing_embedder)
    ids = [c.add(A, {"text": f"durable fact {i} about zebras"}).value.id for i in range(5)]
    c.delete(A, ids[0])
    c.close()
    shutil.rmtree(ShardLayout(settings, 0).keywords_dir())
    c2 = ShardCore(settings, 0, hashing_embedder)
    try:
        assert c2.rebuilt == 4
        assert c2.service.keywords.count() == 4
        hits = c2.search(A, {"query": "zebras", "hybrid": True})
        assert {h.entry.id for h in hits} == set(ids[1:])
        with pytest.raises(NotFoundError):
            c2.get(A, ids[0])
    finally:
        c2.close()


def test_restart_rebuilds_after_interrupted_write(settings: Settings, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    c = ShardCore(settings, 0, hashing_embedder)
    c.add(A, {"text": "first"})
    # a write that reached the vector store but died before the keyword index commit:
    entry = c.service.get(A, c.read(A)[0].id).model_copy(update={"text": "first, edited"})
    c.service.vectors.set_payload([entry])  # behind the keyword index's back
    ShardLayout(settings, 0).dirty_marker.touch()
    c.close()
    c2 = ShardCore(settings, 0, hashing_embedder)
    try:
        assert c2.rebuilt == 1
        assert not ShardLayout(settings, 0).dirty_marker.exists()
        assert [h.entry.text for h in c2.search(A, {"query": "edited"})] == ["first, edited"]
    finally:
        c2.close()


def test_search_json_is_search_as_the_http_api_sends_it(core: ShardCore) -> None:
    import json

    key = UserKey(app="a", user="u")
    core.add(key, {"text": "Ünïcode café notes about the Lisbon trip", "topics": ["travel"]})
    core.add(key, {"text": "Lisbon flight leaves at 9am", "event_time": "2024-05-01T09:00:00Z"})
    options = {"query": "Lisbon trip", "max_results": 5}
    hits = core.search(key, options)
    raw = core.search_json(key, options)
    assert isinstance(raw, bytes) and len(hits) == 2
    assert json.loads(raw) == [h.model_dump(mode="json", by_alias=True) for h in hits]
    assert core.search_json(key, {"query": ""}) == b"[]"


def test_the_gauges_sample_the_shard(settings: Settings, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    """What the metrics thread reads of a shard (the thread swallows its errors)."""
    from actors.shard_telemetry import sample

    c = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        c.ingest(A, "s1", [{"id": "e1", "role": "user", "content": "I moved to Lisbon"}])
        gauges = sample(c)
        assert gauges["queue_depth"] == 1.0 and gauges["jobs_running"] == 0.0 and gauges["cursor_lag_seconds"] >= 0.0
    finally:
        c.close()


def test_seq_keeps_rising_across_restarts(settings: Settings, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    B = UserKey(app="app", user="bob")
    c = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    seqs = [c.add(A, {"text": f"fact {i}"}).seq for i in range(3)]
    first = c.read(A)[0].id
    seqs.append(c.delete(A, first).seq)
    assert seqs == [1, 2, 3, 4]
    assert c.add(B, {"text": "bob's fact"}).seq == 1
    c.close()
    c2 = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        assert c2.add(A, {"text": "after restart"}).seq == 5
        assert c2.clear(A).seq == 6
        assert c2.add(B, {"text": "bob again"}).seq == 2
    finally:
        c2.close()


_ROTATE_AND_DIE = """
import os, sys
from pathlib import Path
from actors.shard import ShardCore
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.stores.embedders import HashingEmbedder

settings = Settings(data_dir=Path(sys.argv[1]), shards=1, embedder={"kind": "hashing", "dim": 64})
core = ShardCore(settings, 0, HashingEmbedder(dim=256), start_workers=False)
key = UserKey(app="app", user="alice")
old = core.add(key, {"text": "the cat is black", "topics": ["pets"]}).value
print(old.id, flush=True)
vectors = core.service.vectors
def die(*args, **kwargs):
    os._exit(9)  # killed between the two writes of the rotation: new entry written, old not retired
vectors.set_payload = die
vectors.delete = die
core.update(key, old.id, {"text": "the cat is white"})
"""


def test_shard_killed_mid_rotation_restarts_with_one_active_entry(settings: Settings, hashing_embedder) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _ROTATE_AND_DIE, str(settings.data_dir)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 9, proc.stderr
    old_id = proc.stdout.split()[0]
    assert ShardLayout(settings, 0).dirty_marker.exists()
    c = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        active = c.read(A)
        assert [e.text for e in active] == ["the cat is white"]
        assert active[0].id != old_id and active[0].topics == ["pets"]
        with pytest.raises(NotFoundError):
            c.get(A, old_id)
        assert [h.entry.id for h in c.search(A, {"query": "cat"})] == [active[0].id]
        assert c.add(A, {"text": "a third"}).seq == 3  # the add (1) and the dead update (2) kept their numbers
    finally:
        c.close()
