"""TTL expiry per app (with optional refresh on access) and job pruning."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.shard import ShardCore
from memcore.errors import NotFoundError
from memcore.model import UserKey
from memcore.settings import Settings
from tests.auto_memory import turns

SHORT = UserKey(app="short-lived", user="alice")
KEEP = UserKey(app="forever", user="alice")


def _core(tmp_path: Path, embedder: Any, **ttl: Any) -> ShardCore:
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256},
                        ttl={"apps": {"short-lived": 60.0}, **ttl})
    return ShardCore(settings, 0, embedder, start_workers=False)


@pytest.fixture
def core(tmp_path: Path, hashing_embedder: Any) -> Iterator[ShardCore]:
    c = _core(tmp_path, hashing_embedder)
    yield c
    c.close()


def test_expired_entries_of_ttl_apps_are_removed(core: ShardCore) -> None:
    old = core.add(SHORT, {"text": "a short-lived note"}).value
    kept = core.add(KEEP, {"text": "a note of an app without TTL"}).value
    assert core.maintenance.expire(now=time.time() + 30) == 0  # not yet
    swept = core.maintenance.run_once(now=time.time() + 61)
    assert swept["expired"] == 1
    with pytest.raises(NotFoundError):
        core.get(SHORT, old.id)
    assert core.service.vectors.get(SHORT, [old.id]) == []  # removed for good, no tombstone
    assert core.get(KEEP, kept.id).id == kept.id
    assert core.search(SHORT, {"query": "short-lived note", "hybrid": True}) == []


def test_a_rewrite_restarts_the_clock(core: ShardCore) -> None:
    entry = core.add(SHORT, {"text": "refreshed by a write"}).value
    time.sleep(0.05)
    again = core.add(SHORT, {"text": "refreshed by a write"}).value  # idempotent re-add: updated_at moves
    assert again.updated_at > entry.updated_at
    cutoff = again.updated_at.timestamp() + 60 - 0.01  # expired by the first write, not by the second
    assert core.maintenance.expire(now=cutoff) == 0
    assert core.maintenance.expire(now=cutoff + 0.02) == 1


def test_reads_count_only_with_refresh_on_access(tmp_path: Path, hashing_embedder: Any) -> None:
    core = _core(tmp_path, hashing_embedder, refresh_on_access=True)
    try:
        read = core.add(SHORT, {"text": "read again later"}).value
        unread = core.add(SHORT, {"text": "never read again"}).value
        core.get(SHORT, read.id)
        assert set(core.archive.access.last_access(SHORT)) == {read.id}
        core.archive.access.touch(SHORT, [read.id], at=time.time() + 100)  # a read 100 s from now
        assert core.maintenance.expire(now=time.time() + 120) == 1
        assert core.get(SHORT, read.id).id == read.id
        with pytest.raises(NotFoundError):
            core.get(SHORT, unread.id)
        assert core.maintenance.expire(now=time.time() + 200) == 1  # the read's lifetime ends too
        assert core.archive.access.last_access(SHORT) == {}
        core.read(KEEP)
        core.add(KEEP, {"text": "no ttl app"})
        core.read(KEEP)
        assert core.archive.access.last_access(KEEP) == {}  # only apps with a TTL record reads
    finally:
        core.close()


def test_reads_do_not_refresh_by_default(core: ShardCore) -> None:
    entry = core.add(SHORT, {"text": "read but not refreshed"}).value
    core.get(SHORT, entry.id)
    assert core.archive.access.last_access(SHORT) == {}


def test_finished_jobs_are_pruned(tmp_path: Path, hashing_embedder: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256},
                        extractor={"job_retention_s": 0.01})
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        skipped = core.ingest(KEEP, "s", [])
        queued = core.ingest(KEEP, "s", turns(1))
        time.sleep(0.05)
        assert core.maintenance.run_once()["pruned_jobs"] == 1
        with pytest.raises(NotFoundError):
            core.job(skipped.job_id)
        assert core.job(queued.job_id).status == "queued"  # unfinished jobs are kept
    finally:
        core.close()


def test_per_entry_expiry_is_swept_in_any_app(tmp_path: Path, hashing_embedder: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256})  # no app TTL
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        brief = core.add(KEEP, {"text": "the parking ticket is in the glovebox", "ttl_s": 5}).value
        lasting = core.add(KEEP, {"text": "the spare key is under the mat"}).value
        also = core.add(SHORT, {"text": "a note that lives longer than its app allows", "ttl_s": 600}).value
        assert core.maintenance.run_once(now=time.time() + 1)["expired"] == 0
        swept = core.maintenance.run_once(now=time.time() + 10)
        assert swept["expired"] == 1 and swept["compacted"] is True
        assert core.service.vectors.get(KEEP, [brief.id]) == []  # hard-deleted
        assert [e.id for e in core.read(KEEP, None)] == [lasting.id]
        assert core.get(SHORT, also.id).id == also.id  # no app TTL for "short-lived" in these settings
        # a re-add without ttl_s before the sweep makes the entry lasting
        core.add(KEEP, {"text": "the parking ticket is in the glovebox", "ttl_s": 5})
        core.add(KEEP, {"text": "the parking ticket is in the glovebox"})
        assert core.maintenance.expire(now=time.time() + 10) == 0
    finally:
        core.close()


def test_app_ttl_and_entry_expiry_follow_one_sweep(core: ShardCore) -> None:
    sooner = core.add(SHORT, {"text": "expires before the app's lifetime", "ttl_s": 5}).value
    later = core.add(SHORT, {"text": "outlives its ttl_s only until the app's lifetime", "ttl_s": 3600}).value
    assert core.maintenance.expire(now=time.time() + 10) == 1
    assert core.service.vectors.get(SHORT, [sooner.id]) == []
    assert core.maintenance.expire(now=time.time() + 61) == 1  # the app's 60 s come first
    assert core.service.vectors.get(SHORT, [later.id]) == []


def test_tombstones_expire_too(core: ShardCore) -> None:
    """A soft-deleted entry keeps its text as a tombstone; the sweep removes it once it is due, by its own
    expiry (any app) or by its app's lifetime counted from the deletion."""
    own = core.add(KEEP, {"text": "the locker code is 4711", "ttl_s": 5}).value
    core.delete(KEEP, own.id, hard=False)
    by_app = core.add(SHORT, {"text": "the gate code is 1234"}).value
    core.delete(SHORT, by_app.id, hard=False)
    lasting = core.add(KEEP, {"text": "the bike lock code is 0000"}).value
    core.delete(KEEP, lasting.id, hard=False)
    def stored(key: UserKey, ids: list[str]) -> list[Any]:
        return core.service.vectors.get(key, ids)  # the current store (a compaction replaces it)

    assert [e.active for e in stored(KEEP, [own.id]) + stored(SHORT, [by_app.id])] == [False, False]
    assert core.maintenance.expire(now=time.time() + 1) == 0
    assert core.maintenance.expire(now=time.time() + 10) == 1  # its own expiry passed
    assert stored(KEEP, [own.id]) == [] and [e.text for e in stored(SHORT, [by_app.id])] == ["the gate code is 1234"]
    assert core.maintenance.run_once(now=time.time() + 61)["expired"] == 1  # the app's lifetime since deletion
    assert stored(SHORT, [by_app.id]) == []
    assert [e.id for e in core.export(KEEP)] == [lasting.id]  # a tombstone that never expires is kept


def test_past_its_apps_lifetime_an_entry_is_gone_from_every_read_before_the_sweep(
        tmp_path: Path, hashing_embedder: Any) -> None:
    """``ttl.apps``: expired means gone from every read at once, not one ``sweep_s`` later; the sweep only
    removes what no read returns any more. A re-add before the sweep is a new entry."""
    lifetime = 1.5  # long enough that a loaded machine reads the entry back before it expires
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256},
                        ttl={"apps": {"short-lived": lifetime}})
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        gone = core.add(SHORT, {"text": "the ferry leaves from pier nine"}).value
        assert core.get(SHORT, gone.id).id == gone.id  # within its lifetime
        dead = core.add(SHORT, {"text": "the old door code was 2468"}).value
        core.delete(SHORT, dead.id, hard=False)  # a tombstone: its lifetime runs from the deletion
        kept = core.add(KEEP, {"text": "the ferry leaves from pier nine"}).value
        core.ingest(SHORT, "s1", turns(2, text="we took the ferry from pier nine {i}"))
        core.ingest(KEEP, "s1", turns(2, text="we took the ferry from pier nine {i}"))
        time.sleep(lifetime + 0.1)  # every write above is past its lifetime now
        assert len(core.service.vectors.get(SHORT, [gone.id, dead.id])) == 2  # still stored: no sweep ran
        with pytest.raises(NotFoundError):
            core.get(SHORT, gone.id)
        assert core.read(SHORT) == [] and core.export(SHORT) == []
        assert core.search(SHORT, {"query": "ferry pier nine", "hybrid": True, "similarity_threshold": -1}) == []
        assert core.preload(SHORT, -1, "ferry pier nine", "system", None).entries == []
        assert core.export_users("short-lived") == []
        assert core.recall(SHORT, "ferry pier nine") == []  # archived turns older than the lifetime too
        assert [e.id for e in core.read(KEEP)] == [kept.id] and len(core.recall(KEEP, "ferry pier nine")) == 2
        again = core.add(SHORT, {"text": "the ferry leaves from pier nine"}).value
        assert again.id == gone.id and again.created_at > gone.created_at  # written afresh
        assert [e.id for e in core.read(SHORT)] == [gone.id]
        assert core.maintenance.expire() == 1  # the tombstone; the re-added entry lives on
    finally:
        core.close()


def test_with_refresh_on_access_a_read_keeps_an_entry_visible_past_its_write(
        tmp_path: Path, hashing_embedder: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256},
                        ttl={"apps": {"short-lived": 0.3}, "refresh_on_access": True})
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        read = core.add(SHORT, {"text": "read again later"}).value
        unread = core.add(SHORT, {"text": "never read again"}).value
        core.archive.access.touch(SHORT, [read.id], at=time.time() + 100)  # a read that extends its life
        time.sleep(0.4)
        assert core.get(SHORT, read.id).id == read.id
        assert [e.id for e in core.read(SHORT)] == [read.id]
        with pytest.raises(NotFoundError):
            core.get(SHORT, unread.id)
        assert set(core.archive.access.last_access(SHORT)) == {read.id}  # the hidden entry was not touched
    finally:
        core.close()
