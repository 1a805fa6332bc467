"""The shard lease of the PostgreSQL archive (:mod:`memcore.stores.postgres_archive.lease`): a new
incarnation of a shard number fences the old one; the check and the write are one transaction; a
transaction a paused process left open does not hold the new incarnation back longer than the statement
timeout. Against the private server of ``postgres_server``."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memcore.errors import ArchiveUnavailableError, FencedError
from memcore.extraction.events import Event
from memcore.model import UserKey
from memcore.stores.postgres_archive import Owner, PostgresArchive
from memcore.stores.sqlite_archive import SqliteArchive
from tests.conftest import pg_schema

A = UserKey(app="app", user="alice")
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def ev(i: int, content: str) -> Event:
    return Event(id=f"e{i}", role="user", content=content, timestamp=T0.replace(second=i))


def test_a_new_incarnation_fences_the_old_one(postgres_server: Any) -> None:
    schema = pg_schema()
    old = PostgresArchive(postgres_server.dsn, schema=schema)
    new = other = None
    try:
        assert old.lease.epoch is None and old.lease.acquire() == 1
        assert old.events.append(A, "s1", [ev(1, "before the takeover")]) == 1
        assert old.sequence.next(A) == 1
        new = PostgresArchive(postgres_server.dsn, schema=schema)
        assert new.lease.acquire() == 2 and not old.lease.fenced
        with pytest.raises(FencedError, match=r"epoch 1.*epoch 2") as refused:
            old.events.append(A, "s1", [ev(2, "after the takeover")])
        assert refused.value.status_code == 503 and old.lease.fenced
        for call in (lambda: old.sequence.next(A), lambda: old.events.read(A), old.lease.check,
                     lambda: old.erase_user(A), old.compact):
            with pytest.raises(FencedError):
                call()
        assert [e.content for e in new.events.read(A)] == ["before the takeover"]  # nothing of the refused call
        assert new.sequence.next(A) == 2
        assert new.events.append(A, "s1", [ev(3, "the new incarnation writes")]) == 1
        new.lease.check()
        other = PostgresArchive(postgres_server.dsn, schema=schema, owner=Owner(1, 2))  # shard 1: its own lease
        assert other.lease.acquire() == 1
        new.lease.check()
    finally:
        for a in (old, new, other):
            if a is not None:
                a.close()


def test_a_write_in_flight_finishes_before_the_new_lease_exists(postgres_server: Any) -> None:
    """The old incarnation's transaction holds the lease row shared until it commits: the new incarnation
    takes the lease after it, never between its check and its write."""
    schema = pg_schema()
    old = PostgresArchive(postgres_server.dsn, schema=schema)
    new = PostgresArchive(postgres_server.dsn, schema=schema)
    try:
        old.lease.acquire()
        taken: list[int] = []
        with old._db.tx() as cur:  # the lease is checked first in the transaction
            thread = threading.Thread(target=lambda: taken.append(new.lease.acquire()))
            thread.start()
            time.sleep(0.5)
            assert not taken, "the new lease was taken while the old incarnation's write was in flight"
            cur.execute("INSERT INTO user_seq (app, user_id, value) VALUES ('app', 'alice', 41)")
            committed = time.monotonic()
        thread.join(10)
        assert taken == [2] and time.monotonic() - committed < 5
        assert new.sequence.next(A) == 42  # the write in flight committed
        with pytest.raises(FencedError):
            old.sequence.next(A)
    finally:
        old.close()
        new.close()


def test_a_transaction_left_open_by_a_paused_process_is_ended_by_the_server(postgres_server: Any) -> None:
    schema = pg_schema()
    new = PostgresArchive(postgres_server.dsn, schema=schema, statement_timeout_s=5.0)  # creates the schema
    old = PostgresArchive(postgres_server.dsn, schema=schema, statement_timeout_s=1.0)  # (DDL may take > 1 s)
    try:
        old.lease.acquire()
        t0 = time.monotonic()
        with pytest.raises(ArchiveUnavailableError), old._db.tx() as cur:
            # the process stops here, holding the lease row; the server ends its session after 1 s idle
            assert new.lease.acquire() == 2
            waited = time.monotonic() - t0
            cur.execute("SELECT 1")
        assert 0.8 < waited < 4
        with pytest.raises(FencedError):
            old.lease.check()
    finally:
        old.close()
        new.close()


def test_the_sqlite_archive_has_nothing_to_fence(tmp_path: Path) -> None:
    first = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    try:
        assert first.lease.acquire() == 1 and first.lease.acquire() == 2
        first.lease.check()
        assert not first.lease.fenced
    finally:
        first.close()
