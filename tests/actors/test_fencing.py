"""Fencing of shard incarnations, for real: an old incarnation of shard 0 runs in a process of its own
(:mod:`tests.actors.incarnation`) and is paused with SIGSTOP, as a partitioned or frozen actor is; a new
incarnation of shard 0 starts on another node's empty data directory (same PostgreSQL archive) and takes
the lease (epoch + 1); the old one is resumed with SIGCONT and tries to write. Its writes are refused with
FencedError (503) before they touch any store, nothing it attempted after the new lease exists is in the
archive or in its vector store, it refuses every later call and its background threads stop; the new
incarnation keeps serving. Real engines (Qdrant Edge, Tantivy, the private PostgreSQL server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from actors.shard import ShardCore
from memcore import factory
from memcore.errors import FencedError
from memcore.layout import ShardLayout
from tests.actors.conftest import done
from tests.actors.incarnation import ALICE, settings
from tests.conftest import pg_schema

ROOT = Path(__file__).resolve().parents[2]


class Incarnation:
    def __init__(self, data: Path, dsn: str, schema: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.actors.incarnation", str(data), dsn, schema],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.epoch = self._line()["ready"]

    def _line(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        assert line, f"the incarnation exited ({self.proc.poll()})"
        return dict(json.loads(line))

    def call(self, method: str, *args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"call": method, "args": list(args)}) + "\n")
        self.proc.stdin.flush()
        return self._line()

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.proc.wait(30)


def texts(data: Path, dsn: str, schema: str, hashing_embedder: Any) -> list[str]:
    """The entries in a node's shard-0 vector store, read from its directory (no incarnation: no lease)."""
    service = factory.build_service(ShardLayout(settings(data, dsn, schema), 0), hashing_embedder)
    try:
        return sorted(e.text for e in service.vectors.scroll(ALICE))
    finally:
        service.vectors.close()
        service.keywords.close()


def test_a_paused_incarnation_is_fenced_when_it_wakes_after_a_new_one_started(
        postgres_server: Any, tmp_path: Path, hashing_embedder: Any) -> None:
    dsn, schema = postgres_server.dsn, pg_schema()
    old = Incarnation(tmp_path / "node1", dsn, schema)
    new: ShardCore | None = None
    try:
        assert old.epoch == 1
        assert old.call("add", {"text": "written before the pause"})["ok"]["seq"] == 1
        job = old.call("ingest", "trip", [{"id": "t1", "role": "user", "content": "We booked the ferry"}])["ok"]
        assert old.call("_wait", job["job_id"])["ok"]["status"] == "done"
        assert "shard0-maintenance" in old.call("_threads")["ok"]

        os.kill(old.proc.pid, signal.SIGSTOP)  # frozen: Ray would see the actor as dead and start a new one
        new = ShardCore(settings(tmp_path / "node2", dsn, schema), 0, hashing_embedder)
        assert new.epoch == 2
        taken_over = new.add(ALICE, {"text": "written by the new incarnation"}).seq
        assert taken_over > 1  # (the extraction job's write took a number too)
        os.kill(old.proc.pid, signal.SIGCONT)

        t0 = time.monotonic()
        refused = old.call("add", {"text": "stale write after the takeover"})
        assert refused["error"] == "FencedError" and "epoch 1" in refused["message"]
        assert FencedError.status_code == 503
        assert time.monotonic() - t0 < 5
        for request in (("ingest", "trip", [{"id": "t2", "role": "user", "content": "stale turn"}]),
                        ("update", "any", {"text": "stale"}), ("forget",), ("read",), ("recall", "ferry")):
            assert old.call(*request)["error"] == "FencedError", request
        deadline = time.monotonic() + 10  # it stops: no extraction worker nor maintenance thread is left
        while old.call("_threads")["ok"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert old.call("_threads")["ok"] == []
        assert old.close() == 0

        # nothing the old incarnation attempted after the new lease is anywhere
        assert texts(tmp_path / "node1", dsn, schema, hashing_embedder) == [
            "User: We booked the ferry", "written before the pause"]
        assert [e.content for e in new.archive.events.read(ALICE)] == ["We booked the ferry"]
        # the new incarnation keeps serving, its numbers keep rising past the refused ones
        assert new.add(ALICE, {"text": "still serving"}).seq == taken_over + 1  # refused calls drew none
        later = done(new, new.ingest(ALICE, "work", [{"role": "user", "content": "The report is due Friday"}]))
        assert later.status == "done"
        assert [h.content for h in new.recall(ALICE, "ferry")] == ["We booked the ferry"]
        assert new.status()["lease_epoch"] == 2
    finally:
        if old.proc.poll() is None:
            os.kill(old.proc.pid, signal.SIGCONT)
            old.proc.kill()
            old.proc.wait(10)
        if new is not None:
            new.close()


def test_writes_outside_the_writes_gate_check_the_lease_first(postgres_server: Any, tmp_path: Path,
                                                               hashing_embedder: Any) -> None:
    """Compaction and generation switches do not pass the writes gate's check: a stale incarnation's
    compaction or new generation is refused before it rewrites anything."""
    dsn, schema = postgres_server.dsn, pg_schema()
    old = ShardCore(settings(tmp_path / "node1", dsn, schema), 0, hashing_embedder, start_workers=False)
    try:
        old.add(ALICE, {"text": "kept"})
        new = ShardCore(settings(tmp_path / "node2", dsn, schema), 0, hashing_embedder, start_workers=False)
        try:
            with pytest.raises(FencedError):
                old.compact()
            assert old.fencing.lost is not None
            with pytest.raises(FencedError):
                old.begin_generation(2, ["app"], ["alice"])
            assert not old.layout.generation_dir(2).exists()
            assert new.add(ALICE, {"text": "the new one writes"}).seq == 2
        finally:
            new.close()
    finally:
        old.close()
