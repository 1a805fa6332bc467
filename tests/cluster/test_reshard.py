"""``memctl reshard``: an embedded data directory's shard count changes offline, every user's entries (vectors,
tombstones), archived turns in every state, cursors, jobs (queued ones too, in each user's order), access
times, write counters, knowledge graphs and diaries follow it; exports are byte-identical; a killed run
completes when run again; refusals while memcluster runs and on bad input. Real Qdrant Edge, Tantivy and
SQLite in temp dirs; memctl as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from actors.backend import LocalShardBackend
from actors.shard import ShardCore
from cluster.reshard import CRASH_ENV
from memcore.data_root import DataRoot, check_shard_count
from memcore.errors import ValidationError
from memcore.ids import shard_of
from memcore.knowledge import KnowledgeGraph
from memcore.layout import ShardLayout
from memcore.model import UserKey
from memcore.records import UserRows
from memcore.settings import Settings
from memcore.stores.edge_compaction import stored_dim
from tests.serve_apps.conftest import make_settings, serve_local

REPO = Path(__file__).resolve().parents[2]
APPS = ("app-a", "app-b")
USERS = [UserKey(app=a, user=f"user-{i:02d}") for a in APPS for i in range(4)]
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def memctl(*args: str, env: dict[str, str] | None = None, home: Path) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), "MEMCTL_STATE": str(home / "memctl.json"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], cwd=REPO, env=full, text=True,
                          capture_output=True, timeout=300)


def reshard(data: Path, shards: int, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """memctl reshard with the test's settings (hashing embedder: the dimension comes from the stores)."""
    return memctl("reshard", "--data-dir", str(data), "--shards", str(shards), "--json", home=home,
                  env={"MEMCLUSTER_EMBEDDER__KIND": "hashing", "MEMCLUSTER_EMBEDDER__DIM": "256", **env})


def events(session: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"{session}-e{i}", "role": "user" if i % 2 == 0 else "assistant",
             "content": f"turn {i} of {session}: I like green tea and 東京 number {i}",
             "timestamp": (T0 + timedelta(minutes=i)).isoformat()} for i in range(start, start + n)]


def populate(data: Path, shards: int, embedder: Any) -> None:
    """Every kind of state: entries (topics, episodes, a rotation's tombstone, a soft delete, a clear), turns
    extracted / hidden / removed, cursors, finished jobs, then queued jobs a stopped shard left, access
    times, a forgotten user (only its write counter is left)."""
    settings = make_settings(data, shards=shards)
    backend = LocalShardBackend(settings, embedder=embedder)
    try:
        for n, key in enumerate(USERS):
            core = backend.core(key)
            core.add(key, {"text": f"{key.user} likes green tea", "topics": ["tea"]})
            core.add(key, {"text": f"{key.user} went to Lisbon", "kind": "episode",
                           "event_time": "2024-03-01T10:00:00+02:00", "participants": ["Bob"], "location": "Lisbon"})
            chess = core.add(key, {"text": f"{key.user} plays chess on Sundays"}).value
            core.update(key, chess.id, {"text": f"{key.user} plays chess on Saturdays"})
            violin = core.add(key, {"text": f"{key.user} takes violin lessons"}).value
            core.delete(key, violin.id)
            job = core.ingest(key, "s1", events("s1", 6))
            core.jobs.wait(job.job_id)
            core.drop_turns(key, "s1", ["s1-e1"])
            if n % 3 == 0:
                core.clear(key)
            core.search(key, {"query": "green tea"})
        gone = USERS[-1]
        backend.core(gone).forget(gone)
    finally:
        backend.close()
    # a shard that stops with jobs queued: their turns wait, per user, for the next start
    cores = [ShardCore(settings, k, embedder, start_workers=False) for k in range(shards)]
    try:
        for key in USERS[:-1]:
            core = cores[shard_of(key, shards)]
            core.ingest(key, "s2", events("s2", 3))
            core.ingest(key, "s2", events("s2", 2, start=3))
            core.archive.access.touch(key, ["some-entry"], at=1_700_000_000.25)
            if shard_of(key, 7) % 2 == 0:  # about half the users keep a knowledge graph and a diary
                kg = KnowledgeGraph(core.archive.graph, core.archive.diary, clock=lambda: T0)
                kg.add(key, {"subject": key.user, "predicate": "likes", "object": "green tea"})
                kg.declare(key, {"name": key.user, "aliases": [f"{key.user} alias"]})
                kg.supersede(key, {"subject": key.user, "predicate": "likes", "object": "oolong"})
                kg.write_diary(key, {"agent": "planner", "text": f"notes of {key.user}", "wing": "home"})
    finally:
        for c in cores:
            c.close()


def normalised(rows: UserRows) -> dict[str, Any]:
    """A user's archive rows without what an archive file numbers for itself (arrival and job numbers):
    turns by rank, jobs by rank, each job's bound as the count of the user's turns it covers."""
    arrivals = sorted(t.arrival for t in rows.turns)
    turns = [t._replace(arrival=arrivals.index(t.arrival)) for t in rows.turns]
    jobs = [j.model_dump(mode="json", exclude={"seq", "upto_seq"})
            | {"covers": None if j.upto_seq is None else sum(1 for a in arrivals if a <= j.upto_seq)}
            for j in sorted(rows.jobs, key=lambda j: j.seq)]
    for j in jobs:  # job times go through float epoch seconds: compare to the microsecond
        for f in ("created_at", "started_at", "finished_at"):
            j[f] = j[f] and datetime.fromisoformat(j[f]).replace(microsecond=0).isoformat()
    return {"turns": turns, "sessions": [tuple(s) for s in rows.sessions], "jobs": jobs, "access": rows.access,
            "sequence": rows.sequence, "graph": (rows.facts, rows.entities), "diary": rows.diary}


def snapshot(data: Path, shards: int) -> dict[UserKey, dict[str, Any]]:
    """Everything of every user, wherever it lives: entries with their vectors, and archive rows."""
    from memcore import factory

    settings = make_settings(data, shards=shards)
    out: dict[UserKey, dict[str, Any]] = {}
    for k in range(shards):
        layout = ShardLayout(settings, k)
        dim = stored_dim(layout.vectors_dir())
        vectors = factory.build_vector_store(layout, dim) if dim else None
        archive = factory.build_archive(layout)
        try:
            keys = set(archive.keys()) | ({e.key for e in vectors.scroll(None)} if vectors else set())
            for key in keys:
                assert key not in out, f"{key} is in two shards"
                assert shard_of(key, shards) == k, f"{key} is in shard {k}, routes to {shard_of(key, shards)}"
                entries: dict[str, Any] = {}
                for page, rows in (vectors.scroll_with_vectors(key) if vectors else ()):
                    for e, v in zip(page, rows, strict=True):
                        entries[e.id] = (e.model_dump(mode="json"), np.asarray(v).tobytes())
                out[key] = {"entries": entries, "archive": normalised(archive.export_user(key))}
        finally:
            archive.close()
            if vectors:
                vectors.close()
    return out


def export_all(data: Path, shards: int, embedder: Any, home: Path) -> dict[str, bytes]:
    """``memctl export`` of every app against a service on the directory; the keyword index is checked too."""
    out: dict[str, bytes] = {}
    settings = make_settings(data, shards=shards)
    backend = Stopped(settings, embedder)
    with serve_local(data, embedder, backend=backend, settings=settings) as served:
        for app in APPS:
            target = home / f"{app}.jsonl"
            r = memctl("export", "--app", app, "--out", str(target), "--url", served.url, home=home)
            assert r.returncode == 0, r.stderr
            out[app] = target.read_bytes()
        statuses = httpx.get(f"{served.url}/readyz", timeout=10).json()["shards"]
    backend.close()
    assert len(statuses) == shards
    for status in statuses:  # every keyword index holds its shard's active entries
        assert status["keyword_docs"] == status["entries"]
    return out


class Stopped(LocalShardBackend):
    """The shards without their worker threads: queued jobs stay queued while a test reads the directory."""

    def __init__(self, settings: Settings, embedder: Any) -> None:
        self.settings = settings
        self.shards = [ShardCore(settings, k, embedder, start_workers=False) for k in range(settings.shards)]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[tuple[Path, int]]:
    """A populated 2-shard and 4-shard directory (copied per test)."""
    base = tmp_path_factory.mktemp("reshard-src")
    for n in (2, 4):
        populate(base / f"n{n}", n, hashing_embedder)
    yield base, 0


def copy_of(source: tuple[Path, int], n: int, dst: Path) -> Path:
    import shutil

    shutil.copytree(source[0] / f"n{n}", dst / "data")
    return dst / "data"


def check_moved(data: Path, before_n: int, after_n: int, before: dict[UserKey, Any], embedder: Any, home: Path,
                exported: dict[str, bytes]) -> None:
    after = snapshot(data, after_n)
    assert after.keys() == before.keys()
    assert after == before
    assert DataRoot(data).recorded() == after_n
    assert not DataRoot(data).plan_file.exists() and not DataRoot(data).work_dir.exists()
    assert export_all(data, after_n, embedder, home) == exported


def run_queued(data: Path, shards: int, embedder: Any) -> None:
    """The queued jobs run after the move, each user's in ingest order, and the cursors move."""
    settings = make_settings(data, shards=shards)
    backend = LocalShardBackend(settings, embedder=embedder)
    try:
        for key in USERS[:-1]:
            core = backend.core(key)
            jobs = core.archive.jobs.of_session(key, "s2")  # queued until now (the snapshots compared statuses)
            assert len(jobs) == 2
            done = [core.jobs.wait(j.job_id) for j in jobs]
            assert [j.status for j in done] == ["done", "done"], [j.reason for j in done]
            assert done[0].started_at and done[1].started_at and done[0].started_at <= done[1].started_at
            assert not core.archive.events.unextracted(key, "s2")
            assert core.archive.sessions.last_extract_at(key, "s2") == T0 + timedelta(minutes=4)
            assert core.archive.sequence.next(key) > 1
    finally:
        backend.close()


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(2, 5), (4, 3)], ids=["grow-2-to-5", "shrink-4-to-3"])
def test_reshard_moves_everything(source: tuple[Path, int], tmp_path: Path, hashing_embedder: Any,
                                  n: int, m: int) -> None:
    data = copy_of(source, n, tmp_path)
    before = snapshot(data, n)
    assert len(before) == len(USERS) and any(v["archive"]["sequence"] and not v["entries"] for v in before.values())
    assert any(v["archive"]["graph"][0] and v["archive"]["diary"] for v in before.values())
    exported = export_all(data, n, hashing_embedder, tmp_path)
    assert all(exported.values())
    r = reshard(data, m, tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["from_shards"] == n and summary["to_shards"] == m and summary["users"] == len(USERS)
    assert summary["entries"] == sum(len(v["entries"]) for v in before.values())
    assert sorted(DataRoot(data).shard_dirs()) == list(range(m))
    check_moved(data, n, m, before, hashing_embedder, tmp_path, exported)
    # the old count is refused now, by the shard and by `memctl up`'s check
    with pytest.raises(ValidationError, match="memctl reshard"):
        check_shard_count(make_settings(data, shards=n))
    jobs_answer(data, m, hashing_embedder, before)
    run_queued(data, m, hashing_embedder)


def jobs_answer(data: Path, shards: int, embedder: Any, before: dict[UserKey, Any]) -> None:
    """``GET /v1/jobs/{id}`` still answers for jobs recorded before the move (their ids name the old shard)."""
    settings = make_settings(data, shards=shards)
    backend = Stopped(settings, embedder)
    moved = 0
    with serve_local(data, embedder, backend=backend, settings=settings) as served, served.client() as c:
        for key, state in before.items():
            for job in state["archive"]["jobs"]:
                r = c.get(f"/v1/jobs/{job['job_id']}")
                assert r.status_code == 200, r.text
                assert (r.json()["app"], r.json()["user"], r.json()["status"]) == (key.app, key.user, job["status"])
                moved += int(job["job_id"].split("-")[0]) != shard_of(key, shards)
        assert c.get(f"/v1/jobs/0-{'0' * 32}").status_code == 404
    backend.close()
    assert moved  # some jobs' ids name a shard their user no longer lives on


@pytest.mark.slow
def test_killed_reshard_completes_when_run_again(source: tuple[Path, int], tmp_path: Path,
                                                 hashing_embedder: Any) -> None:
    """SIGKILL at every step, one after the other: each run resumes from what the previous kill left."""
    data = copy_of(source, 2, tmp_path)
    exported = export_all(data, 2, hashing_embedder, tmp_path)
    before = snapshot(data, 2)
    root = DataRoot(data)
    for crash in ("written:1", "user:1", "written:1", "copied", "retired", "placed", "recorded"):
        r = reshard(data, 3, tmp_path, **{CRASH_ENV: crash})
        assert r.returncode == -9, (crash, r.returncode, r.stderr)
        assert root.plan_file.exists()
        for count in (2, 3):  # nothing starts on a half-changed directory, whichever count it is asked for
            with pytest.raises(ValidationError, match="unfinished"):
                check_shard_count(make_settings(data, shards=count))
        if crash == "user:1":  # another target is refused while one is unfinished
            r = reshard(data, 4, tmp_path)
            assert r.returncode == 1 and "unfinished" in r.stderr
    assert not (root.path / "shards").exists() or root.recorded() == 3
    r = reshard(data, 3, tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    check_moved(data, 2, 3, before, hashing_embedder, tmp_path, exported)


def test_refused_while_a_shard_runs(source: tuple[Path, int], tmp_path: Path, hashing_embedder: Any) -> None:
    data = copy_of(source, 2, tmp_path)
    settings = make_settings(data, shards=2)
    # the memcluster this memctl home started answers on the directory
    backend = Stopped(settings, hashing_embedder)
    with serve_local(data, hashing_embedder, backend=backend, settings=settings) as served:
        (tmp_path / "memctl.json").write_text(json.dumps({"base_url": served.url, "data_dir": str(data)}))
        r = reshard(data, 3, tmp_path)
        assert r.returncode == 1
        assert f"memcluster is running on {data} ({served.url})" in r.stderr and "memctl down" in r.stderr
    backend.close()
    (tmp_path / "memctl.json").unlink()
    # any shard of any process holds the directory's lock
    running = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        r = reshard(data, 3, tmp_path)
        assert r.returncode == 1
        assert "memcluster runs on it" in r.stderr and "memctl down" in r.stderr
        assert DataRoot(data).recorded() == 2 and not DataRoot(data).plan_file.exists()
    finally:
        running.close()
    # and a shard does not start while a reshard holds the directory
    from memcore.data_root import hold_exclusive

    lock = hold_exclusive(DataRoot(data))
    assert lock is not None
    try:
        with pytest.raises(Exception, match="locked by `memctl reshard`"):
            ShardCore(settings, 0, hashing_embedder, start_workers=False)
    finally:
        lock.close()


def test_bad_input(source: tuple[Path, int], tmp_path: Path) -> None:
    data = copy_of(source, 2, tmp_path)
    for bad, says in ((0, "at least 1"), (2, "already has 2 shards")):
        r = reshard(data, bad, tmp_path)
        assert r.returncode == 2, r.stderr
        assert says in r.stderr
    r = reshard(tmp_path / "nothing-here", 3, tmp_path)
    assert r.returncode == 2 and "not a data directory" in r.stderr
    r = memctl("reshard", "--data-dir", str(data), "--shards", "3", home=tmp_path,
               env={"MEMCLUSTER_VECTOR_STORE__BACKEND": "server", "MEMCLUSTER_VECTOR_STORE__URL": "http://127.0.0.1:1"})
    assert r.returncode == 2 and "server backend" in r.stderr
    assert snapshot(data, 2) and DataRoot(data).recorded() == 2


def test_shard_count_is_recorded_and_guarded(tmp_path: Path) -> None:
    settings: Settings = make_settings(tmp_path / "d", shards=3)
    check_shard_count(settings)
    assert DataRoot.of(settings).recorded() == 3
    with pytest.raises(ValidationError, match="holds 3 shards, but shards=5"):
        check_shard_count(make_settings(tmp_path / "d", shards=5))
    # a directory written before the record: its shard directories say N
    for k in range(2):
        (tmp_path / "old" / "shards" / f"{k:04d}").mkdir(parents=True)
    with pytest.raises(ValidationError, match="holds 2 shards"):
        check_shard_count(make_settings(tmp_path / "old", shards=4))
    check_shard_count(make_settings(tmp_path / "old", shards=2))
    assert (tmp_path / "old" / "shard-count").read_text() == "2\n"
    # `memctl up` says so before it starts anything
    r = memctl("up", "--data-dir", str(tmp_path / "d"), "--shards", "5", home=tmp_path)
    assert r.returncode == 1 and "holds 3 shards, but shards=5" in r.stderr and "memctl reshard" in r.stderr
    assert not (tmp_path / "memctl.json").exists()
