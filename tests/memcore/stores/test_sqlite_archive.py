"""The SQLite event archive: events, cursors, recall, jobs, access times, write numbers."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memcore.archive_ports import (
    AccessRepository,
    DiaryRepository,
    EventArchive,
    EventRepository,
    GraphRepository,
    JobRepository,
    SequenceRepository,
    SessionRepository,
)
from memcore.errors import NotFoundError
from memcore.extraction.events import Event
from memcore.model import UserKey
from memcore.records import JobRecord
from memcore.stores.archive_codec import from_us, to_us
from memcore.stores.sqlite_archive import SqliteArchive

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")
OTHER_APP = UserKey(app="other", user="alice")
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def ev(i: int, content: str, role: str = "user", **kw: object) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(seconds=i), **kw)  # type: ignore[arg-type]


@pytest.fixture
def archive(tmp_path: Path) -> SqliteArchive:
    a = SqliteArchive(tmp_path / "archive.sqlite3", tmp_path / "seq.sqlite3")
    yield a  # type: ignore[misc]
    a.close()


PORTS = {"": EventArchive, "events": EventRepository, "sessions": SessionRepository, "jobs": JobRepository,
         "access": AccessRepository, "sequence": SequenceRepository, "graph": GraphRepository,
         "diary": DiaryRepository}


@pytest.mark.parametrize("part", list(PORTS))
def test_implements_every_method_of_the_port(archive: SqliteArchive, part: str) -> None:
    """Each repository has every method its port declares, with the same parameters."""
    port: EventArchive = archive
    impl = getattr(port, part) if part else port
    declared = [n for n, v in vars(PORTS[part]).items() if callable(v) and not n.startswith("_")]
    assert declared
    for name in declared:
        want = list(inspect.signature(getattr(PORTS[part], name)).parameters)[1:]
        assert list(inspect.signature(getattr(impl, name)).parameters) == want, name
    assert port.events.read(A) == []


def test_an_archive_without_graph_tables_gets_them_on_open(tmp_path: Path) -> None:
    """The graph's migration: a file written before the graph and diary tables existed gains them, its turns
    kept; opening it again changes nothing."""
    archive = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    archive.events.append(A, "s1", [ev(0, "hello")])
    archive._db.script("DROP TABLE graph_facts; DROP TABLE graph_entities; DROP TABLE graph_aliases; DROP TABLE diary")
    archive.close()
    for _ in range(2):
        reopened = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
        try:
            assert [e.content for e in reopened.events.read(A)] == ["hello"]
            assert reopened.graph.facts(A) == [] and reopened.graph.count(A) == 0
            assert reopened.diary.read(A, None, limit=5) == ([], 0)
        finally:
            reopened.close()


def test_write_numbers_rise_per_user_and_survive_a_reopen_and_an_erasure(tmp_path: Path) -> None:
    archive = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    assert [archive.sequence.next(A) for _ in range(3)] == [1, 2, 3] and archive.sequence.next(B) == 1
    archive.events.append(A, "s1", [ev(0, "hello")])
    assert archive.erase_user(A)["events"] == 1
    archive.close()
    reopened = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    try:
        assert reopened.sequence.next(A) == 4 and reopened.events.read(A) == []
    finally:
        reopened.close()


@pytest.mark.parametrize("when", [T0, datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),
                                  datetime(2262, 1, 1, tzinfo=UTC)])
def test_microsecond_times_round_trip(when: datetime) -> None:
    assert from_us(to_us(when)) == when


def test_append_is_idempotent_and_keeps_text_turns_only(archive: SqliteArchive) -> None:
    events = [ev(0, "hello there"), ev(1, "hi!", "assistant"), ev(2, "12 KB of logs", "tool"),
              ev(3, "   ", "user"), Event(id="e4", role="assistant", content="", timestamp=T0,
                                          tool_calls=[{"id": "c1", "type": "function"}])]
    assert archive.events.append(A, "s1", events) == 2
    assert archive.events.append(A, "s1", [*events, ev(5, "and more")]) == 1  # the whole session resent
    changed = ev(0, "a different first version")
    assert archive.events.append(A, "s1", [changed]) == 0  # an id keeps its first version
    assert [(e.id, e.content) for e in archive.events.read(A, "s1")] == [("e0", "hello there"), ("e1", "hi!"),
                                                                   ("e5", "and more")]
    assert archive.events.read(A, "other") == [] and archive.events.read(B) == []
    assert archive.sessions.sessions(A) == ["s1"]


def test_external_context_mark_covers_tool_events(archive: SqliteArchive) -> None:
    archive.events.append(A, "s1", [ev(0, "plain")])
    assert not archive.sessions.has_external_context(A, "s1")
    archive.events.append(A, "s1", [ev(1, "retrieved document text", "tool", external_context=True)])
    assert archive.sessions.has_external_context(A, "s1")
    assert not archive.sessions.has_external_context(A, "s2")


def test_cursor_moves_forward_only_and_is_durable(tmp_path: Path) -> None:
    archive = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    assert archive.sessions.last_extract_at(A, "s1") is None
    archive.sessions.set_last_extract_at(A, "s1", T0 + timedelta(seconds=5))
    archive.sessions.set_last_extract_at(A, "s1", T0)  # never backwards
    assert archive.sessions.last_extract_at(A, "s1") == T0 + timedelta(seconds=5)
    assert archive.sessions.last_extract_at(B, "s1") is None
    archive.close()
    reopened = SqliteArchive(tmp_path / "a.sqlite3", tmp_path / "seq.sqlite3")
    try:
        assert reopened.sessions.last_extract_at(A, "s1") == T0 + timedelta(seconds=5)
    finally:
        reopened.close()


def test_recall_is_scoped_and_ranked(archive: SqliteArchive) -> None:
    archive.events.append(A, "trip", [ev(0, "We booked the ferry to Naxos for the August trip"),
                               ev(1, "The ferry leaves at 7am", "assistant")])
    archive.events.append(A, "work", [ev(2, "The quarterly report is due Friday")])
    archive.events.append(A, "now", [ev(3, "Which ferry did we book?")])
    archive.events.append(B, "bob", [ev(4, "Bob's ferry to Crete")])
    archive.events.append(OTHER_APP, "x", [ev(5, "ferry ferry ferry Naxos")])
    hits = archive.events.search(A, "ferry to Naxos", exclude_session="now")
    assert [(h.session, h.event_id) for h in hits] == [("trip", "e0"), ("trip", "e1")]
    assert hits[0].score > hits[1].score > 0 and hits[0].role == "user"
    assert {h.session for h in archive.events.search(A, "ferry")} == {"trip", "now"}
    assert archive.events.search(A, "ferry", limit=1)[0].event_id in {"e0", "e1", "e3"}
    assert archive.events.search(A, "   ") == [] and archive.events.search(A, '"') == []


@pytest.mark.parametrize("query", ['ferry" OR "x', "NOT ferry", "ferry*", "scope:abc", "(ferry", "a:b:c", "😀 ferry"])
def test_recall_takes_query_syntax_literally(archive: SqliteArchive, query: str) -> None:
    archive.events.append(A, "trip", [ev(0, "the ferry")])
    archive.events.append(B, "b", [ev(1, "the ferry")])
    assert {h.session for h in archive.events.search(A, query)} <= {"trip"}


def test_recall_matches_cjk_characters(archive: SqliteArchive) -> None:
    archive.events.append(A, "cn", [ev(0, "我们下周去上海出差")])
    archive.events.append(A, "en", [ev(1, "nothing relevant")])
    assert [h.session for h in archive.events.search(A, "上海")] == ["cn"]


def _job(n: int, key: UserKey = A, session: str = "s1", status: str = "queued") -> JobRecord:
    return JobRecord(job_id=f"0-{n:032x}", status=status, app=key.app, user=key.user, session=session,  # type: ignore[arg-type]
                     created_at=T0, upto=T0 + timedelta(seconds=n), upto_seq=n)


def test_job_lifecycle_and_requeue(archive: SqliteArchive) -> None:
    jobs = [archive.jobs.create(_job(i)) for i in range(1, 4)]
    assert [j.seq for j in jobs] == [1, 2, 3]
    assert archive.jobs.pending_upto(A, "s1") == 3 and archive.jobs.get(jobs[1].job_id).upto_seq == 2
    running = archive.jobs.start(jobs[0].job_id)
    assert running.status == "running" and running.attempts == 1 and running.started_at is not None
    done = archive.jobs.finish(running.model_copy(update={
        "status": "done", "operations": [{"index": 0, "status": "applied"}], "errors": ["x"],
        "counts": {"applied": 1}, "cursor": T0}))
    assert (done.status, done.operations, done.errors, done.counts, done.cursor) == (
        "done", [{"index": 0, "status": "applied"}], ["x"], {"applied": 1}, T0)
    assert done.finished and done.finished_at is not None
    archive.jobs.start(jobs[1].job_id)  # the shard dies here: job 2 running, job 3 queued
    again = archive.jobs.requeue_unfinished()
    assert [(j.job_id, j.status, j.attempts) for j in again] == [(jobs[1].job_id, "queued", 1),
                                                                 (jobs[2].job_id, "queued", 0)]
    assert [j.seq for j in archive.jobs.of_session(A, "s1")] == [1, 2, 3]
    assert archive.jobs.counts() == {"done": 1, "queued": 2}
    with pytest.raises(NotFoundError):
        archive.jobs.get("0-" + "f" * 32)


def test_prune_keeps_unfinished_jobs(archive: SqliteArchive) -> None:
    archive.jobs.create(_job(1, status="done"))
    archive.jobs.create(_job(2, status="skipped"))
    archive.jobs.create(_job(3))
    assert archive.jobs.prune(older_than_s=3600) == 2  # created at T0, long ago
    assert archive.jobs.counts() == {"queued": 1}


def test_access_times(archive: SqliteArchive) -> None:
    archive.access.touch(A, ["m1", "m2"], at=100.0)
    archive.access.touch(A, ["m1"], at=50.0)  # never backwards
    archive.access.touch(B, ["m1"], at=200.0)
    assert archive.access.last_access(A) == {"m1": 100.0, "m2": 100.0}
    archive.access.forget(A, ["m1"])
    assert archive.access.last_access(A) == {"m2": 100.0}


def test_delta_is_unextracted_turns_in_arrival_order(archive: SqliteArchive) -> None:
    """A late turn (new id, older timestamp) and turns in the same second are all pending until marked."""
    archive.events.append(A, "s1", [ev(5, "first to arrive"), ev(6, "second", "assistant")])
    archive.events.append(B, "s1", [ev(7, "another user's turn")])
    archive.events.append(A, "s1", [ev(0, "late: older timestamp, arrived third"),
                             Event(id="same-1", role="user", content="same second a", timestamp=T0),
                             Event(id="same-2", role="user", content="same second b", timestamp=T0)])
    pending = archive.events.unextracted(A, "s1")
    assert [e.id for _, e in pending] == ["e5", "e6", "e0", "same-1", "same-2"]
    seqs = [q for q, _ in pending]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    bounded = archive.events.unextracted(A, "s1", after_seq=seqs[1], upto_seq=seqs[3])
    assert [e.id for _, e in bounded] == ["e0", "same-1"]
    assert archive.events.mark_extracted(A, "s1", seqs[2]) == 3
    assert [e.id for _, e in archive.events.unextracted(A, "s1")] == ["same-1", "same-2"]
    assert archive.events.mark_extracted(A, "s1", ids=["same-2", "nope"]) == 1
    assert [e.id for _, e in archive.events.unextracted(A, "s1")] == ["same-1"]
    assert [e.id for e in archive.events.arrived(A, "s1")] == ["e5", "e6", "e0", "same-1", "same-2"]
    assert archive.events.read(A, "s1")[0].id == "e0"  # read stays in time order
    assert [e.id for _, e in archive.events.unextracted(B, "s1")] == ["e7"]


def test_an_archive_without_arrival_numbers_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE events (app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL, id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, ts_us INTEGER NOT NULL,
            external_context INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (app, user, session, id));
        CREATE TABLE sessions (app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL,
            last_extract_us INTEGER, external_context INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL,
            PRIMARY KEY (app, user, session));
        CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, app TEXT NOT NULL,
            user TEXT NOT NULL, session TEXT NOT NULL, status TEXT NOT NULL, upto_us INTEGER,
            created_at REAL NOT NULL, started_at REAL, finished_at REAL, sync INTEGER NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0, reason TEXT, result TEXT, cursor_us INTEGER);
    """)
    for i in range(3):
        db.execute("INSERT INTO events VALUES ('app', 'alice', 's1', ?, 'user', ?, ?, 0)",
                   (f"e{i}", f"turn {i}", to_us(T0 + timedelta(seconds=i))))
    db.execute("INSERT INTO sessions VALUES ('app', 'alice', 's1', ?, 0, 0)", (to_us(T0 + timedelta(seconds=1)),))
    db.commit()
    db.close()
    archive = SqliteArchive(path, tmp_path / "seq.sqlite3")
    try:
        assert [e.id for _, e in archive.events.unextracted(A, "s1")] == ["e2"]  # e0, e1 were at or before the cursor
        archive.events.append(A, "s1", [ev(9, "new after the upgrade")])
        assert [(q, e.id) for q, e in archive.events.unextracted(A, "s1")] == [(3, "e2"), (4, "e9")]
    finally:
        archive.close()


def test_a_user_moves_to_another_archive_whole(archive: SqliteArchive, tmp_path: Path) -> None:
    """export_user / import_users: every row of the user in every state lands in another file, renumbered
    after that file's own rows (arrival order, job order and job bounds kept); importing again replaces."""
    from memcore.records import Turn

    archive.events.append(B, "s0", [ev(0, "bob's turn")])
    archive.events.append(A, "s1", [ev(i, f"green tea {i} 東京") for i in range(1, 6)])
    archive.events.mark_extracted(A, "s1", upto_seq=3)
    archive.events.hide(A, [Turn("s1", "e2")])
    archive.events.remove(A, [Turn("s1", "e3")])
    archive.sessions.set_last_extract_at(A, "s1", T0 + timedelta(seconds=2))
    queued = archive.jobs.create(JobRecord(job_id="j-queued", status="queued", app="app", user="alice",
                                           session="s1", created_at=T0, upto_seq=5))
    archive.access.touch(A, ["m1"], at=1234.5)
    archive.sequence.next(A), archive.sequence.next(A)
    assert archive.keys() == [A, B]
    rows = archive.export_user(A)
    assert [t.state for t in rows.turns] == ["visible", "hidden", "removed", "visible", "visible"]
    assert rows.sequence == 2 and rows.access == (("m1", 1234.5),) and rows.jobs[0].upto_seq == queued.upto_seq

    other = SqliteArchive(tmp_path / "b" / "archive.sqlite3", tmp_path / "b" / "seq.sqlite3")
    try:
        other.events.append(B, "s9", [ev(i, "padding") for i in range(7)])
        other.import_users([rows])
        other.import_users([rows])  # a second import (a resumed move) replaces, never duplicates
        moved = other.export_user(A)
        assert [t._replace(arrival=0) for t in moved.turns] == [t._replace(arrival=0) for t in rows.turns]
        assert [t.arrival for t in moved.turns] == sorted(t.arrival for t in moved.turns)
        assert min(t.arrival for t in moved.turns) > 7  # after the target's own turns
        assert moved.sessions == rows.sessions and moved.access == rows.access and moved.sequence == 2
        # the queued job still covers the same turns (its bound named arrival 5 of the first file: e4)
        job = other.jobs.requeue_unfinished()[0]
        assert job.job_id == "j-queued"
        covered = [e.id for _, e in archive.events.unextracted(A, "s1", upto_seq=queued.upto_seq)]
        assert covered == ["e4"]
        assert [e.id for _, e in other.events.unextracted(A, "s1", upto_seq=job.upto_seq)] == covered
        assert other.jobs.pending_upto(A, "s1") == job.upto_seq
        assert [h.event_id for h in other.events.search(A, "東京")][:1] and \
            {h.event_id for h in other.events.search(A, "tea")} == {"e1", "e4", "e5"}  # hidden/removed: not found
        assert other.sequence.next(A) == 3  # the write counter keeps rising
        assert other.events.count(B) == 7
    finally:
        other.close()
