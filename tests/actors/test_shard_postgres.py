"""One shard with its event archive in PostgreSQL (``archive.backend: postgres``), end to end: ingest,
extraction, session recall, and restarts on an empty local data directory (a shard moved to another
node): queued jobs run there, cursors, recall and write numbers are where they were.

Real engines (Qdrant Edge and Tantivy on temp dirs, the private PostgreSQL of ``postgres_server``); the
entries live in the shard's local Qdrant Edge here, so only what the archive holds survives a move.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.shard import ShardCore
from memcore.errors import ArchiveUnavailableError
from memcore.extraction.events import ExtractionResult
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.model import UserKey
from memcore.settings import Settings
from tests.actors.conftest import done
from tests.conftest import pg_schema

A = UserKey(app="app", user="alice")


def settings(data: Path, server: Any, schema: str) -> Settings:
    return Settings(data_dir=data, shards=1, embedder={"kind": "hashing", "dim": 256},
                    archive={"backend": "postgres", "dsn": server.dsn, "db_schema": schema})


def test_a_shard_resumes_from_postgres_on_an_empty_disk(postgres_server: Any, tmp_path: Path,
                                                         hashing_embedder: Any) -> None:
    schema = pg_schema()
    first = ShardCore(settings(tmp_path / "node1", postgres_server, schema), 0, hashing_embedder)
    try:
        job = done(first, first.ingest(A, "trip", [{"role": "user", "content": "We booked the ferry to Naxos"}]))
        assert job.status == "done"
        assert [e.text for e in first.read(A)] == ["User: We booked the ferry to Naxos"]
        seqs = [first.add(A, {"text": f"fact {i}"}).seq for i in range(2)]
        cursor = first.archive.sessions.last_extract_at(A, "trip")
        assert cursor is not None
    finally:
        first.close()
    # the shard comes back on another node; it dies before its workers run the job it accepted
    second = ShardCore(settings(tmp_path / "node2", postgres_server, schema), 0, hashing_embedder,
                       start_workers=False)
    try:
        queued = second.ingest(A, "work", [{"role": "user", "content": "The quarterly report is due Friday"}])
        assert queued.status == "queued"
        seqs.append(second.add(A, {"text": "fact on node 2"}).seq)
    finally:
        second.close()
    third = ShardCore(settings(tmp_path / "node3", postgres_server, schema), 0, hashing_embedder)
    try:
        assert [j.job_id for j in third.archive.jobs.of_session(A, "work")] == [queued.job_id]
        finished = done(third, queued)
        assert finished.status == "done" and finished.attempts == 1
        assert "User: The quarterly report is due Friday" in [e.text for e in third.read(A)]
        assert third.archive.sessions.last_extract_at(A, "trip") == cursor
        hits = third.recall(A, "ferry to Naxos")
        assert [(h.session, h.content) for h in hits] == [("trip", "We booked the ferry to Naxos")]
        seqs.append(third.add(A, {"text": "fact on node 3"}).seq)
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert third.archive.events.count(A) == 2 and third.archive.jobs.counts() == {"done": 2}
    finally:
        third.close()
    assert not list(tmp_path.rglob("*.sqlite3"))  # no archive on any node's disk


class _GatedExtractor(ExtractorWrapper):
    """The verbatim extractor, held at its first call until released."""

    def __init__(self) -> None:
        super().__init__(VerbatimExtractor())
        self.entered = threading.Event()
        self.release = threading.Event()

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        self.entered.set()
        self.release.wait(30)
        return extract()


def test_the_database_going_down_mid_job_leaves_the_workers_running(postgres_server: Any, tmp_path: Path,
                                                                     hashing_embedder: Any) -> None:
    gated = _GatedExtractor()
    s = settings(tmp_path / "node", postgres_server, pg_schema())
    s.archive.pool_timeout_s = 1.0
    s.archive.connect_timeout_s = 1
    core = ShardCore(s, 0, hashing_embedder, extractor=gated)
    try:
        first = core.ingest(A, "s1", [{"role": "user", "content": "I moved to Lisbon"}])
        assert gated.entered.wait(10)
        postgres_server.stop()  # the job is extracting: its archive writes will fail
        try:
            gated.release.set()
            time.sleep(2.5)  # the job meets the outage (pool timeout 1 s per call)
            with pytest.raises(ArchiveUnavailableError):
                core.ingest(A, "s1", [{"role": "user", "content": "during the outage"}])
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                second = core.ingest(A, "s1", [{"role": "user", "content": "and then to Porto"}])
                break
            except ArchiveUnavailableError:
                assert time.monotonic() < deadline, "the shard did not recover"
                time.sleep(0.2)
        assert done(core, second).status == "done"  # a worker is still there to run it
        texts = sorted(e.text for e in core.read(A))
        assert texts == ["User: I moved to Lisbon", "User: and then to Porto"]  # nothing acknowledged is lost
        assert core.archive.events.unextracted(A, "s1") == []
        assert core.archive.jobs.get(first.job_id).status in ("running", "failed", "done")
    finally:
        core.close()


def test_forget_and_compact_leave_the_text_in_no_table_file(postgres_server: Any, tmp_path: Path,
                                                            hashing_embedder: Any) -> None:
    from tests.memcore.stores.test_postgres_archive import _files_holding

    marker = "okapi-forgotten-90210"
    core = ShardCore(settings(tmp_path / "node", postgres_server, pg_schema()), 0, hashing_embedder)
    try:
        job = done(core, core.ingest(A, "s1", [{"role": "user", "content": f"my locker code is {marker}"}]))
        assert job.status == "done" and core.recall(A, marker)
        assert _files_holding(postgres_server, marker.encode())  # the check sees it while it is there
        core.forget(A)
        assert core.recall(A, marker) == [] and core.archive.jobs.of_session(A, "s1") == []
        core.compact()
        assert _files_holding(postgres_server, marker.encode()) == []
        assert not [p for p in (tmp_path / "node").rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
    finally:
        core.close()
