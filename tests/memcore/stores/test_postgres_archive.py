"""The PostgreSQL event archive against a private PostgreSQL 15 server (``postgres_server``, tests/conftest.py),
congruent with the SQLite engine; ownership by shard, erasure down to the table files, database faults."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
    ShardLease,
)
from memcore.errors import ArchiveUnavailableError, NotFoundError, StoreError, ValidationError
from memcore.extraction.events import Event
from memcore.ids import shard_of
from memcore.knowledge import KnowledgeGraph
from memcore.model import UserKey
from memcore.records import JobRecord, Turn, UserRows
from memcore.stores.postgres_archive import Owner, PostgresArchive
from memcore.stores.sqlite_archive import SqliteArchive
from tests.conftest import pg_schema

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")
OTHER_APP = UserKey(app="other", user="alice")
GRAPH_ONLY = UserKey(app="app", user="dan")
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def ev(i: int, content: str, role: str = "user", **kw: Any) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(seconds=i), **kw)


def job(n: int, key: UserKey = A, session: str = "s1", status: str = "queued") -> JobRecord:
    return JobRecord(job_id=f"0-{n:032x}", status=status, app=key.app, user=key.user, session=session,  # type: ignore[arg-type]
                     created_at=T0, upto=T0 + timedelta(seconds=n), upto_seq=n)


def open_pg(server: Any, schema: str | None = None, **kw: Any) -> PostgresArchive:
    return PostgresArchive(server.dsn, schema=schema or pg_schema(), **kw)


@pytest.fixture
def archive(postgres_server: Any) -> Iterator[PostgresArchive]:
    a = open_pg(postgres_server)
    yield a
    a.close()


PORTS = {"": EventArchive, "events": EventRepository, "sessions": SessionRepository, "jobs": JobRepository,
         "access": AccessRepository, "sequence": SequenceRepository, "graph": GraphRepository,
         "diary": DiaryRepository, "lease": ShardLease}


@pytest.mark.parametrize("part", list(PORTS))
def test_implements_every_method_of_the_port(archive: PostgresArchive, part: str) -> None:
    port: EventArchive = archive
    impl = getattr(port, part) if part else port
    declared = [n for n, v in vars(PORTS[part]).items() if callable(v) and not n.startswith("_")]
    assert declared
    for name in declared:
        want = list(inspect.signature(getattr(PORTS[part], name)).parameters)[1:]
        assert list(inspect.signature(getattr(impl, name)).parameters) == want, name


# -- congruence ---------------------------------------------------------------------------------------


def _jobs(records: list[JobRecord]) -> list[tuple[Any, ...]]:
    """What both engines must agree on of a job (its times of start and finish are the clock's)."""
    return [(j.job_id, j.seq, j.status, j.app, j.user, j.session, j.attempts, j.sync, j.upto, j.upto_seq,
             j.reason, j.operations, j.errors, j.counts, j.cursor, j.started_at is None, j.finished_at is None)
            for j in records]


def _hits(archive: EventArchive, key: UserKey, query: str, **kw: Any) -> list[tuple[str, str, str]]:
    return [(h.session, h.event_id, h.content) for h in archive.events.search(key, query, **kw)]


def scenario(archive: EventArchive) -> list[tuple[str, object]]:
    """The same calls on an empty archive, every observable result recorded in order."""
    out: list[tuple[str, object]] = []

    def note(step: str, value: object) -> None:
        out.append((step, value))

    trip = [ev(0, "We booked the ferry to Naxos for the August trip"),
            ev(1, "The ferry leaves at seven in the morning", "assistant"),
            ev(2, "tool output", "tool")]
    note("append trip", archive.events.append(A, "trip", trip))
    note("append again", archive.events.append(A, "trip", trip))
    note("append work", archive.events.append(A, "work", [ev(3, "The quarterly report is due Friday"),
                                                          ev(4, "Send the report draft to Maria first")]))
    note("append cn", archive.events.append(A, "cn", [ev(5, "我们下周去上海出差"),
                                                      ev(6, "上海的天气怎么样", "assistant")]))
    note("append late", archive.events.append(A, "trip", [Event(id="late", role="user", content="ferry tickets",
                                                                timestamp=T0 - timedelta(hours=1))]))
    note("append bob", archive.events.append(B, "bob", [ev(7, "Bob takes the ferry to Crete",
                                                               external_context=True)]))
    note("append other app", archive.events.append(OTHER_APP, "x", [ev(8, "ferry ferry ferry Naxos")]))
    note("read A", archive.events.read(A))
    note("read trip", archive.events.read(A, "trip"))
    note("arrived trip", archive.events.arrived(A, "trip"))
    pending = archive.events.unextracted(A, "trip")
    note("unextracted", pending)
    note("unextracted bounded", archive.events.unextracted(A, "trip", after_seq=pending[0][0],
                                                             upto_seq=pending[1][0]))
    note("mark upto", archive.events.mark_extracted(A, "trip", upto_seq=pending[0][0]))
    note("mark ids", archive.events.mark_extracted(A, "trip", ids=["late", "nope"]))
    note("unextracted after", archive.events.unextracted(A, "trip"))
    note("oldest unextracted", archive.events.oldest_unextracted())
    note("visible", sorted(archive.events.visible(A, "trip", ["e0", "late", "nope"])))
    note("sessions in order", archive.events.sessions_in_order(A))
    note("search ferry naxos", _hits(archive, A, "ferry to Naxos"))
    note("search excl", _hits(archive, A, "ferry", exclude_session="work"))
    note("search since", _hits(archive, A, "ferry", since=T0))  # the late turn, an hour before T0, has expired
    note("search report", _hits(archive, A, "quarterly report draft"))
    note("search cjk", _hits(archive, A, "上海出差"))
    note("search cjk one char", _hits(archive, A, "天气"))
    note("search limit", _hits(archive, A, "report", limit=1))
    note("search syntax", _hits(archive, A, 'ferry" OR "x NOT (scope:abc*'))
    note("search empty", _hits(archive, A, "   "))
    note("count", (archive.events.count(), archive.events.count(A), archive.events.count(B)))
    note("sessions", (archive.sessions.sessions(A), archive.sessions.users(), archive.sessions.users(apps=["app"]),
                      archive.sessions.users(users=["alice"])))
    note("external", (archive.sessions.has_external_context(B, "bob"),
                      archive.sessions.has_external_context(A, "trip")))
    archive.sessions.set_last_extract_at(A, "trip", T0 + timedelta(seconds=5))
    archive.sessions.set_last_extract_at(A, "trip", T0)  # never backwards
    archive.sessions.set_last_extract_at(A, "fresh", T0)  # a session noted by its cursor only
    note("cursor", (archive.sessions.last_extract_at(A, "trip"), archive.sessions.last_extract_at(A, "fresh"),
                    archive.sessions.last_extract_at(A, "none")))
    # turns: hide, remove, expire
    note("turns", archive.events.turns(A, session="trip"))
    note("turns by id", archive.events.turns(A, ids=["e3", "e5", "missing"]))
    note("hide", archive.events.hide(A, [Turn("work", "e3"), Turn("work", "e3"), Turn("work", "missing")]))
    note("hide again", archive.events.hide(A, [Turn("work", "e3")]))
    note("remove", archive.events.remove(A, [Turn("trip", "e1"), Turn("work", "e3")]))
    note("remove again", archive.events.remove(A, [Turn("trip", "e1")]))
    note("turns after", archive.events.turns(A))
    note("arrived after", archive.events.arrived(A, "trip"))
    note("read after", archive.events.read(A))
    note("search after", _hits(archive, A, "ferry report morning"))
    # jobs
    created = [archive.jobs.create(job(i)) for i in range(1, 4)]
    created.append(archive.jobs.create(job(4, key=B, session="bob")))
    note("jobs created", _jobs(created))
    note("pending upto", (archive.jobs.pending_upto(A, "s1"), archive.jobs.pending_upto(A, "nope")))
    running = archive.jobs.start(created[0].job_id, sync=True)
    note("start", _jobs([running]))
    done = archive.jobs.finish(running.model_copy(update={
        "status": "done", "operations": [{"index": 0, "status": "applied"}], "errors": ["x"],
        "counts": {"applied": 1}, "cursor": T0, "reason": "why", "reason_code": None}))
    note("finish", _jobs([done]))
    archive.jobs.start(created[1].job_id)
    note("requeue", _jobs(archive.jobs.requeue_unfinished()))
    note("of session", _jobs(archive.jobs.of_session(A, "s1")))
    note("stored gone", archive.jobs.stored(job(99)).job_id)
    with pytest.raises(NotFoundError):
        archive.jobs.get("0-" + "f" * 32)
    with pytest.raises(NotFoundError):
        archive.jobs.start("0-" + "e" * 32)
    note("counts", archive.jobs.counts())
    note("pending after", archive.jobs.pending_upto(A, "s1"))
    note("prune", archive.jobs.prune(older_than_s=3600))
    note("counts after prune", archive.jobs.counts())
    # expiry keeps what an unfinished job of the session has yet to extract
    archive.events.append(A, "s1", [ev(20, "pending turn of s1")])
    note("expire", archive.events.expire("app", T0 + timedelta(seconds=30)))
    note("read after expire", archive.events.read(A))
    note("expire other app", archive.events.expire("other", T0 - timedelta(days=1)))
    # access
    archive.access.touch(A, ["m1", "m2", "m1"], at=100.0)
    archive.access.touch(A, ["m1"], at=50.0)
    archive.access.touch(B, ["m1"], at=200.0)
    archive.access.touch(A, [])
    note("access", (archive.access.last_access(A), archive.access.last_access(B)))
    archive.access.forget(A, ["m1", "zz"])
    archive.access.forget(A, [])
    note("access after forget", archive.access.last_access(A))
    # sequence and erasure
    note("sequence", [archive.sequence.next(A) for _ in range(3)] + [archive.sequence.next(B)])
    note("erase", archive.erase_user(A))
    note("erase again", archive.erase_user(A))
    note("after erase", (archive.events.read(A), archive.sessions.sessions(A), archive.jobs.of_session(A, "s1"),
                         archive.access.last_access(A), archive.sessions.users(), archive.events.count()))
    note("sequence after erase", archive.sequence.next(A))
    archive.compact()
    note("after compact", (archive.events.read(B), _hits(archive, B, "ferry Crete"), archive.jobs.counts()))
    return out


def test_congruence_with_the_sqlite_engine(postgres_server: Any, tmp_path: Path) -> None:
    lite = SqliteArchive(tmp_path / "archive.sqlite3", tmp_path / "seq.sqlite3")
    pg = open_pg(postgres_server)
    try:
        expected, got = scenario(lite), scenario(pg)
    finally:
        lite.close()
        pg.close()
    assert [s for s, _ in got] == [s for s, _ in expected]
    for (step, want), (_, have) in zip(expected, got, strict=True):
        assert have == want, step
    steps = dict(got)
    assert steps["search cjk"] and steps["search cjk"][0][1] == "e5"  # both CJK turns match, the trip's first
    assert [h[1] for h in steps["search ferry naxos"]][:1] == ["e0"]
    assert "late" in {h[1] for h in steps["search excl"]} and "late" not in {h[1] for h in steps["search since"]}
    assert steps["search since"]


class _Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> None:
        self.t += timedelta(**kw)


def graph_scenario(archive: EventArchive) -> list[tuple[str, object]]:
    """The same knowledge-graph and diary calls on an empty archive (through :class:`KnowledgeGraph`, which
    holds the rules, and the repositories directly), every observable result recorded in order."""
    out: list[tuple[str, object]] = []
    clock = _Clock()
    kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock)

    def note(step: str, value: object) -> None:
        out.append((step, value))

    note("add", kg.add(A, {"subject": "Alice", "predicate": "lives in", "object": "Paris",
                           "valid_from": "2024-01-01", "memories": ["m1"]}))
    clock.advance(seconds=5)
    note("add again", kg.add(A, {"subject": " alice ", "predicate": "Lives-In", "object": "paris"}))
    note("add source", kg.add(A, {"subject": "Alice", "predicate": "lives_in", "object": "Paris",
                                  "turns": ["s1/e1"]}))
    clock.advance(days=1)
    note("add more", [kg.add(A, f) for f in (
        {"subject": "Alice", "predicate": "works at", "object": "Acme", "subject_type": "person"},
        {"subject": "Acme", "predicate": "based in", "object": "Paris", "confidence": 0.5},
        {"subject": "Carol", "predicate": "mentors", "object": "Alice", "valid_from": "2022-01-01"},
        {"subject": "Paris", "predicate": "twinned with", "object": "Rome"})])
    note("declare", kg.declare(A, {"name": "alice", "aliases": ["Ally", "Al Smith", "ally"]}))
    note("declare again", kg.declare(A, {"name": "Alice", "aliases": ["Al"]}))  # aliases replaced
    note("add bob", kg.add(B, {"subject": "Bob", "predicate": "likes", "object": "tea"}))
    known = clock()
    clock.advance(days=7)
    note("supersede", kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon",
                                       "valid_from": "2025-01-08"}))
    clock.advance(days=1)
    note("invalidate", kg.invalidate(A, {"subject": "Alice", "predicate": "works_at", "object": "Acme",
                                         "ended": "2025-01-20"}))
    note("invalidate unknown", kg.invalidate(A, {"subject": "Nobody", "predicate": "x", "object": "y"}))
    note("entities", archive.graph.entities(A))
    note("entities some", archive.graph.entities(A, ["alice", "rome", "zed"]))
    note("resolve", archive.graph.resolve(A, ["ally", "al", "alice", "al smith", "acme", "nobody"]))
    note("resolve none", archive.graph.resolve(A, []))
    note("facts", archive.graph.facts(A))
    note("facts believed", archive.graph.facts(A, believed_only=True))
    for direction in ("outgoing", "incoming", "both"):
        note(f"facts {direction}", archive.graph.facts(A, ["alice", "paris"], direction=direction))  # type: ignore[arg-type]
    note("facts predicate", archive.graph.facts(A, ["alice"], predicate="lives_in"))
    note("facts none", archive.graph.facts(A, []))
    lines = sorted({f.fact_id for f in archive.graph.facts(A)})
    note("lines", archive.graph.lines(A, lines[:2]))
    note("count", (archive.graph.count(A), archive.graph.count(B)))
    note("query now", kg.query(A, {"entity": "Al"}))
    note("query as of", kg.query(A, {"entity": "alice", "as_of": "2024-06-01"}))
    note("query known at", kg.query(A, {"entity": "alice", "known_at": known.isoformat()}))
    note("history", kg.history(A, "alice"))
    note("timeline", kg.timeline(A))
    note("neighbourhood 1", kg.neighbourhood(A, {"entity": "Alice"}))
    note("neighbourhood 2", kg.neighbourhood(A, {"entity": "Alice", "hops": 2, "as_of": "2024-06-01"}))
    note("neighbourhood known", kg.neighbourhood(A, {"entity": "Alice", "hops": 3, "known_at": known.isoformat()}))
    note("for text", kg.current_for_text(A, "what does Ally do at acme?"))
    note("drop sources", kg.drop_sources(A, memories=["m1"]))
    note("delete line", kg.delete_fact(A, kg.query(A, {"entity": "Rome"})[0].fact_id))
    note("drop none", archive.graph.write(A, at=clock(), drop=[]))
    clock.advance(seconds=1)  # (the diary's times below count from T0)
    note("supersede from a turn", kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Porto",
                                                   "valid_from": "2025-02-01", "turns": ["s2/e1"]}))
    clock.advance(seconds=1)
    note("drop the superseding turn", kg.drop_sources(A, turns=["s2/e1"]))  # Lisbon is open again
    note("facts after delete", archive.graph.facts(A))
    # the diary
    for n, (agent, text, wing) in enumerate([("planner", "first", None), ("planner", "second", "trips"),
                                             ("critic", "review", None), ("planner", "third", "trips")]):
        clock.advance(hours=1)
        note(f"diary write {n}", kg.write_diary(A, {"agent": agent, "text": text, "wing": wing}))
    note("diary write again", archive.diary.write(A, kg.read_diary(A, {"agent": "planner"})[0]))
    archive.diary.write(B, [kg.write_diary(B, {"text": "bob's entry"})])
    note("diary planner", kg.read_diary(A, {"agent": "planner"}))
    note("diary limit", kg.read_diary(A, {"agent": "planner", "limit": 2}))
    note("diary wing", kg.read_diary(A, {"agent": "planner", "wing": "trips"}))
    note("diary range", kg.read_diary(A, {"agent": "planner", "since": (T0 + timedelta(days=9, hours=1.5)).isoformat(),
                                          "until": (T0 + timedelta(days=9, hours=3.5)).isoformat()}))
    note("diary every agent", archive.diary.read(A, None, limit=None))
    note("diary none", archive.diary.read(A, "nobody", limit=3))
    note("users", (archive.graph.users("app"), archive.graph.users("other")))
    # expiry, erasure
    note("expire graph", archive.graph.expire("app", T0 + timedelta(days=2)))
    note("expire diary", archive.diary.expire("app", T0 + timedelta(days=9, hours=2.5)))
    note("after expire", (archive.graph.facts(A), archive.diary.read(A, None, limit=None)))
    note("keys", archive.keys())
    note("erase", archive.erase_user(A))
    note("erase again", archive.erase_user(A))
    note("after erase", (archive.graph.facts(A), archive.graph.entities(A), archive.graph.resolve(A, ["ally"]),
                         archive.diary.read(A, None, limit=None), archive.graph.users("app"), archive.keys()))
    note("bob kept", (archive.graph.facts(B), archive.diary.read(B, None, limit=None)))
    archive.compact()
    note("after compact", (archive.graph.count(B), kg.query(B, {"entity": "bob"})))
    return out


def _engines(postgres_server: Any, tmp_path: Path, name: str) -> tuple[SqliteArchive, PostgresArchive]:
    lite = SqliteArchive(tmp_path / name / "archive.sqlite3", tmp_path / name / "seq.sqlite3")
    try:
        return lite, open_pg(postgres_server)
    except BaseException:
        lite.close()
        raise


def _congruent(expected: list[tuple[str, object]], got: list[tuple[str, object]]) -> None:
    assert [s for s, _ in got] == [s for s, _ in expected]
    for (step, want), (_, have) in zip(expected, got, strict=True):
        assert have == want, step


def test_graph_and_diary_are_congruent_with_the_sqlite_engine(postgres_server: Any, tmp_path: Path) -> None:
    lite, pg = _engines(postgres_server, tmp_path, "a")
    try:
        expected, got = graph_scenario(lite), graph_scenario(pg)
    finally:
        lite.close()
        pg.close()
    _congruent(expected, got)
    steps = dict(got)
    assert steps["resolve"] == {"al": "alice", "alice": "alice", "acme": "acme"}  # the aliases were replaced
    assert len(steps["diary limit"][0]) == 2 and steps["diary limit"][1] == 3  # type: ignore[index, arg-type]
    assert steps["diary every agent"][1] == 4 and len(steps["diary planner"][0]) == 3  # type: ignore[index, arg-type]
    assert steps["drop the superseding turn"] == 1  # the Porto line went, and Lisbon is open again:
    assert [(f.object_name, f.valid_to is None) for f in steps["facts after delete"]  # type: ignore[attr-defined]
            if f.retired_at is None and f.predicate == "lives_in"] == [("Paris", False), ("Lisbon", True)]
    assert steps["expire diary"] == 2 and steps["expire graph"] > 0  # type: ignore[operator]
    assert steps["erase"]["graph_facts"] > 0 and steps["erase"]["diary"] == 2  # type: ignore[index, operator]
    assert steps["after erase"][:4] == ([], [], {}, ([], 0))  # type: ignore[index]


def _fill(archive: EventArchive) -> None:
    """A user with turns in every state, a cursor, jobs (one finished, one queued with a bound), access times,
    a write counter, a knowledge graph (a retired version, aliases) and diary entries; another user beside it
    (and one with graph rows only)."""
    archive.events.append(B, "s0", [ev(0, "bob's turn")])
    archive.events.append(A, "s1", [ev(i, f"green tea {i} 東京") for i in range(1, 6)])
    archive.events.append(A, "s2", [ev(6, "another session", external_context=True)])
    archive.events.mark_extracted(A, "s1", upto_seq=archive.events.unextracted(A, "s1")[2][0])
    archive.events.hide(A, [Turn("s1", "e2")])
    archive.events.remove(A, [Turn("s1", "e3")])
    archive.sessions.set_last_extract_at(A, "s1", T0 + timedelta(seconds=2))
    done = archive.jobs.create(job(1))
    archive.jobs.finish(archive.jobs.start(done.job_id).model_copy(update={"status": "done", "counts": {"a": 1}}))
    bound = archive.events.unextracted(A, "s1")[-1][0]  # the queued job covers up to e5
    archive.jobs.create(job(2).model_copy(update={"upto_seq": bound}))
    archive.jobs.create(job(3, session="s2").model_copy(update={"upto_seq": 0}))  # covers none of s2's turns
    archive.access.touch(A, ["m1", "m2"], at=1234.5)
    archive.sequence.next(A), archive.sequence.next(A)
    clock = _Clock()
    kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock)
    kg.add(A, {"subject": "Alice", "predicate": "lives in", "object": "Paris", "memories": ["m1"]})
    kg.declare(A, {"name": "Alice", "aliases": ["Ally"]})
    clock.advance(days=1)
    kg.supersede(A, {"subject": "Alice", "predicate": "lives in", "object": "Lisbon", "turns": ["s1/e1"]})
    kg.write_diary(A, {"agent": "planner", "text": "moved", "wing": "home"})
    clock.advance(hours=1)
    kg.write_diary(A, {"text": "second entry"})
    kg.add(GRAPH_ONLY, {"subject": "Dan", "predicate": "likes", "object": "tea"})


def _rows(rows: UserRows) -> tuple[Any, ...]:
    """What must be kept by a move: everything but the numbers the target archive draws (and the wall-clock
    times of the sessions' last writes, compared within an engine)."""
    return (rows.key, [t._replace(arrival=0) for t in rows.turns], [s._replace(updated_at=0.0) for s in rows.sessions],
            [(j.job_id, j.status, j.session, j.upto, j.attempts, j.counts, j.cursor, j.sync) for j in rows.jobs],
            rows.access, rows.sequence, rows.facts, rows.entities, rows.diary)


def transfer_scenario(src: EventArchive, dst: EventArchive) -> list[tuple[str, object]]:
    """export_user from ``src`` (filled by :func:`_fill`), import_users into ``dst`` (which has rows of its own):
    every observable result recorded in order."""
    out: list[tuple[str, object]] = []

    def note(step: str, value: object) -> None:
        out.append((step, value))

    _fill(src)
    note("keys", src.keys())
    rows = src.export_user(A)
    note("exported", _rows(rows))
    note("exported arrivals sorted", [t.arrival for t in rows.turns] == sorted(t.arrival for t in rows.turns))
    pad = UserKey(app="app", user="carol")
    dst.events.append(pad, "s9", [ev(i, "padding") for i in range(10, 17)])
    dst.sequence.next(A), dst.sequence.next(A), dst.sequence.next(A)  # higher than the source's: kept
    dst.import_users([rows, src.export_user(B), src.export_user(GRAPH_ONLY)])
    dst.import_users([rows])  # a resumed move replaces, never duplicates
    moved = dst.export_user(A)
    note("moved", _rows(moved._replace(sequence=None)))
    note("moved sequence", moved.sequence)
    note("sessions kept whole", moved.sessions == rows.sessions)
    note("keys after", dst.keys())
    note("arrivals after the target's", min(t.arrival for t in moved.turns) > max(
        t.arrival for t in dst.export_user(pad).turns))
    for session in ("s1", "s2"):
        want = [[e.id for _, e in src.events.unextracted(A, session, upto_seq=j.upto_seq)]
                for j in src.jobs.of_session(A, session)]
        got = [[e.id for _, e in dst.events.unextracted(A, session, upto_seq=j.upto_seq)]
               for j in dst.jobs.of_session(A, session)]
        note(f"bounds cover the same turns {session}", (want, got))
    note("jobs in order", [j.seq for j in moved.jobs] == sorted(j.seq for j in moved.jobs))
    note("requeue", [j.job_id for j in dst.jobs.requeue_unfinished()])
    note("read", (dst.events.read(A), dst.events.turns(A), dst.sessions.sessions(A),
                  dst.sessions.has_external_context(A, "s2"), dst.sessions.last_extract_at(A, "s1")))
    note("search", _hits(dst, A, "tea 東京"))
    kg = KnowledgeGraph(dst.graph, dst.diary, clock=lambda: T0 + timedelta(days=2))
    note("graph", (kg.query(A, {"entity": "ally"}), kg.history(A, "alice"), dst.graph.count(A),
                   dst.graph.resolve(A, ["ally"]), kg.read_diary(A, {"agent": "planner"}),
                   dst.diary.read(A, None, limit=None), dst.graph.users("app")))
    note("graph only", (dst.graph.facts(GRAPH_ONLY),
                        dst.export_user(GRAPH_ONLY).facts == tuple(src.graph.facts(GRAPH_ONLY))))
    note("access", dst.access.last_access(A))
    note("sequence next", dst.sequence.next(A))
    note("appended after", (dst.events.append(A, "s1", [ev(9, "after the move")]),
                            [e.id for _, e in dst.events.unextracted(A, "s1")]))
    return out


def test_transfer_is_congruent_with_the_sqlite_engine(postgres_server: Any, tmp_path: Path) -> None:
    lite_src, pg_src = _engines(postgres_server, tmp_path, "src")
    lite_dst, pg_dst = _engines(postgres_server, tmp_path, "dst")
    try:
        expected, got = transfer_scenario(lite_src, lite_dst), transfer_scenario(pg_src, pg_dst)
    finally:
        for a in (lite_src, pg_src, lite_dst, pg_dst):
            a.close()
    _congruent(expected, got)
    steps = dict(got)
    exported = steps["exported"]
    assert steps["moved"] == (*exported[:5], None, *exported[6:]) and steps["moved sequence"] == 3  # type: ignore[index]
    assert len(exported[6]) == 3 and exported[6][0].retired_at is not None and len(exported[8]) == 2  # type: ignore[index]
    assert GRAPH_ONLY in steps["keys"] and GRAPH_ONLY in steps["keys after"]  # type: ignore[operator]
    assert steps["graph only"][1] is True and steps["graph"][3] == {"ally": "alice"}  # type: ignore[index]
    assert steps["sessions kept whole"] is True and steps["arrivals after the target's"] is True
    assert steps["jobs in order"] is True
    for session in ("s1", "s2"):
        want, have = steps[f"bounds cover the same turns {session}"]  # type: ignore[misc]
        assert want == have
    assert steps["bounds cover the same turns s1"][0][-1] == ["e4", "e5"]  # type: ignore[index]


@pytest.mark.parametrize("direction", ["sqlite to postgres", "postgres to sqlite"])
def test_a_user_moves_between_engines(postgres_server: Any, tmp_path: Path, direction: str) -> None:
    lite, pg = _engines(postgres_server, tmp_path, "x")
    src, dst = (lite, pg) if direction == "sqlite to postgres" else (pg, lite)
    try:
        _fill(src)
        rows = src.export_user(A)
        dst.import_users([rows])
        moved = dst.export_user(A)
        assert _rows(moved) == _rows(rows) and moved.sessions == rows.sessions
        assert [[e.id for _, e in dst.events.unextracted(A, "s1", upto_seq=j.upto_seq)]
                for j in dst.jobs.of_session(A, "s1")] == \
            [[e.id for _, e in src.events.unextracted(A, "s1", upto_seq=j.upto_seq)]
             for j in src.jobs.of_session(A, "s1")]
        assert _hits(dst, A, "tea") == _hits(src, A, "tea")
    finally:
        lite.close()
        pg.close()


def test_recall_scores_are_bm25_and_users_stay_apart(archive: PostgresArchive) -> None:
    archive.events.append(A, "trip", [ev(0, "ferry to Naxos"), ev(1, "ferry ferry at noon today and more words")])
    archive.events.append(B, "b", [ev(2, "ferry to Naxos")])
    hits = archive.events.search(A, "naxos ferry")
    assert [h.event_id for h in hits] == ["e0", "e1"] and hits[0].score > hits[1].score > 0
    assert [h.event_id for h in archive.events.search(B, "naxos")] == ["e2"]
    assert archive.events.search(UserKey(app="app", user="nobody"), "ferry") == []


# -- ownership, restarts ------------------------------------------------------------------------------


def test_each_shard_serves_its_users_and_the_count_can_change(postgres_server: Any) -> None:
    schema = pg_schema()
    users = [UserKey(app="app", user=f"u{i}") for i in range(12)]
    shards = [open_pg(postgres_server, schema, owner=Owner(k, 3)) for k in range(3)]
    try:
        for n, key in enumerate(users):
            own = shards[shard_of(key, 3)]
            own.events.append(key, "s", [ev(n, f"turn of {key.user}")])
            own.jobs.create(job(n + 1, key=key, session="s"))
        for k, shard in enumerate(shards):
            mine = sorted((u for u in users if shard_of(u, 3) == k), key=lambda u: u.user)
            assert shard.sessions.users() == mine
            assert [j.user for j in shard.jobs.requeue_unfinished()] == [u.user for u in users if u in mine]
            assert shard.jobs.counts() == ({"queued": len(mine)} if mine else {})
            assert shard.events.count() == len(mine)
    finally:
        for shard in shards:
            shard.close()
    regrown = [open_pg(postgres_server, schema, owner=Owner(k, 5)) for k in range(5)]  # 3 -> 5 shards, no move
    try:
        for k, shard in enumerate(regrown):
            assert shard.sessions.users() == sorted((u for u in users if shard_of(u, 5) == k), key=lambda u: u.user)
        assert sum(s.events.count() for s in regrown) == len(users)
        key = users[0]
        assert [e.content for e in regrown[shard_of(key, 5)].events.read(key)] == ["turn of u0"]
    finally:
        for shard in regrown:
            shard.close()


def test_counters_cursors_and_jobs_survive_a_restart(postgres_server: Any) -> None:
    schema = pg_schema()
    first = open_pg(postgres_server, schema)
    assert [first.sequence.next(A) for _ in range(3)] == [1, 2, 3]
    first.events.append(A, "s1", [ev(0, "hello")])
    first.sessions.set_last_extract_at(A, "s1", T0)
    queued = first.jobs.create(job(1))
    first.erase_user(B)
    first.close()
    second = open_pg(postgres_server, schema)  # schema creation again: idempotent
    try:
        assert second.sequence.next(A) == 4 and second.sequence.next(B) == 1
        assert [j.job_id for j in second.jobs.requeue_unfinished()] == [queued.job_id]
        assert second.sessions.last_extract_at(A, "s1") == T0
        assert [e.id for _, e in second.events.unextracted(A, "s1")] == ["e0"]
        assert second.erase_user(A)["events"] == 1 and second.sequence.next(A) == 5
    finally:
        second.close()
    postgres_server.stop()
    postgres_server.start()
    third = open_pg(postgres_server, schema)
    try:
        assert third.sequence.next(A) == 6  # committed numbers survive a server restart
    finally:
        third.close()


# -- erasure ------------------------------------------------------------------------------------------


def _files_holding(server: Any, needle: bytes) -> list[str]:
    """Table and index files of the server's databases (not its WAL) holding ``needle``, after a checkpoint."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    found = []
    for path in (server.data / "base").rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            found.append(str(path))
    return found


def test_erasure_leaves_the_text_in_no_table_file(postgres_server: Any) -> None:
    archive = open_pg(postgres_server)
    try:
        removed, erased, expired = b"zanzibar-removed-7731", b"quokka-erased-5519", b"mauve-expired-2240"
        fact, diary = b"ocelot-fact-3301", b"narwhal-diary-8812"
        archive.events.append(A, "s1", [ev(0, removed.decode() + " then"), ev(1, "keep this one")])
        archive.events.append(B, "s2", [ev(2, erased.decode())])
        kg = KnowledgeGraph(archive.graph, archive.diary)
        kg.add(B, {"subject": "Bob", "predicate": "keeps", "object": fact.decode()})
        kg.declare(B, {"name": "Bob", "aliases": [fact.decode() + " alias"]})
        kg.write_diary(B, {"text": diary.decode()})
        archive.events.append(OTHER_APP, "s3", [ev(3, expired.decode())])
        archive.events.mark_extracted(OTHER_APP, "s3")
        done = archive.jobs.create(job(1, key=B, session="s2", status="done"))
        archive.jobs.finish(done.model_copy(update={"operations": [{"text": erased.decode()}]}))
        for needle in (removed, erased, expired, fact, diary):
            assert _files_holding(postgres_server, needle), needle  # the check sees text that is there
        assert archive.events.remove(A, [Turn("s1", "e0")]) == 1
        assert archive.erase_user(B) == {"events": 1, "sessions": 1, "jobs": 1, "access": 0, "graph_facts": 1,
                                         "graph_entities": 2, "graph_aliases": 1, "diary": 1}
        assert archive.events.expire("other", T0 + timedelta(days=1)) == 1
        assert archive.events.search(A, "zanzibar") == [] and archive.events.search(B, "quokka") == []
        archive.compact()
        for needle in (removed, erased, expired, fact, diary):
            assert _files_holding(postgres_server, needle) == [], needle
        assert [e.content for e in archive.events.read(A)] == ["keep this one"]
    finally:
        archive.close()


# -- faults of the database ---------------------------------------------------------------------------


def test_a_stopped_server_gives_a_typed_error_and_the_archive_recovers(postgres_server: Any) -> None:
    from serve_apps.http.errors import response_for

    archive = open_pg(postgres_server, pool_timeout_s=1.0, connect_timeout_s=1)
    try:
        archive.events.append(A, "s1", [ev(0, "before the outage")])
        postgres_server.stop()
        try:
            for call in (lambda: archive.events.read(A), lambda: archive.sequence.next(A),
                         lambda: archive.events.append(A, "s1", [ev(1, "during")])):
                t0 = time.monotonic()
                with pytest.raises(ArchiveUnavailableError) as err:
                    call()
                assert time.monotonic() - t0 < 10
                assert isinstance(err.value, StoreError) and err.value.field == "archive"
            response = response_for(err.value)
            assert response.status_code == 503 and response.headers["Retry-After"]
            assert response.body.startswith(b'{"error":"ArchiveUnavailableError","field":"archive","message":')
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 20
        while True:  # the pool replaces its broken connections by itself
            try:
                events = archive.events.read(A)
                break
            except ArchiveUnavailableError:
                assert time.monotonic() < deadline, "the archive did not recover"
                time.sleep(0.2)
        assert [e.content for e in events] == ["before the outage"]  # the failed append left nothing
    finally:
        archive.close()


def test_an_unreachable_server_at_start_is_the_same_error(postgres_server: Any) -> None:
    from tests.conftest import free_port

    t0 = time.monotonic()
    with pytest.raises(ArchiveUnavailableError):
        PostgresArchive(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", schema=pg_schema(),
                        pool_timeout_s=1.0, connect_timeout_s=1)
    assert time.monotonic() - t0 < 10


def test_a_full_pool_waits_then_fails_never_hangs(postgres_server: Any) -> None:
    archive = open_pg(postgres_server, pool_min=1, pool_size=1, pool_timeout_s=0.5)
    try:
        archive.events.append(A, "s1", [ev(0, "hello")])
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with archive._db.pool.connection():
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(5)
        t0 = time.monotonic()
        with pytest.raises(ArchiveUnavailableError, match=r"within 0\.5 s"):
            archive.events.read(A)
        assert 0.4 <= time.monotonic() - t0 < 5
        release.set()
        holder.join(5)
        assert [e.id for e in archive.events.read(A)] == ["e0"]  # the connection came back to the pool
    finally:
        archive.close()


def test_a_locked_table_fails_after_the_statement_timeout(postgres_server: Any) -> None:
    import psycopg

    archive = open_pg(postgres_server, statement_timeout_s=0.5)
    try:
        archive.events.append(A, "s1", [ev(0, "hello")])
        with psycopg.connect(postgres_server.dsn) as locker:  # a transaction holding the table
            locker.execute(f'LOCK TABLE "{archive._db.schema}".events IN ACCESS EXCLUSIVE MODE')
            t0 = time.monotonic()
            with pytest.raises(ArchiveUnavailableError, match="QueryCanceled"):
                archive.events.read(A)
            assert 0.4 <= time.monotonic() - t0 < 5
        assert [e.id for e in archive.events.read(A)] == ["e0"]
        archive.compact()  # runs without the timeout, and restores it afterwards
        with psycopg.connect(postgres_server.dsn) as locker:
            locker.execute(f'LOCK TABLE "{archive._db.schema}".events IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(ArchiveUnavailableError):
                archive.events.read(A)
    finally:
        archive.close()


# -- settings and factory -----------------------------------------------------------------------------


def test_the_factory_builds_the_engine_the_settings_name(postgres_server: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from memcore.factory import build_archive
    from memcore.layout import ShardLayout
    from memcore.settings import Settings

    default = build_archive(ShardLayout(Settings(data_dir=tmp_path), 0))
    try:
        assert isinstance(default, SqliteArchive)  # the embedded default is unchanged
    finally:
        default.close()
    with pytest.raises(ValidationError, match=r"archive\.dsn"):
        build_archive(ShardLayout(Settings(data_dir=tmp_path, archive={"backend": "postgres"}), 0))
    monkeypatch.setenv("MEMCLUSTER_ARCHIVE__BACKEND", "postgres")
    monkeypatch.setenv("MEMCLUSTER_ARCHIVE__DSN", postgres_server.dsn)
    monkeypatch.setenv("MEMCLUSTER_ARCHIVE__DB_SCHEMA", pg_schema())
    settings = Settings(data_dir=tmp_path / "pg", shards=3)
    built = build_archive(ShardLayout(settings, 2))
    try:
        assert isinstance(built, PostgresArchive) and built.owner == Owner(2, 3)
        assert built.sequence.next(A) == 1
    finally:
        built.close()
    assert not (tmp_path / "pg").exists() or not any((tmp_path / "pg").rglob("*.sqlite3"))


def test_opening_a_current_schema_waits_for_no_open_transaction(postgres_server: Any) -> None:
    """A shard starting while another serves: a schema this version made is left alone (its digest), so the
    start takes no table lock. Running the DDL again would wait behind open transactions (``CREATE INDEX IF NOT
    EXISTS`` takes a share lock that an uncommitted write holds up, ``ADD COLUMN IF NOT EXISTS`` an exclusive
    one that a reader holds up) and hold up every query after it."""
    import psycopg

    schema = pg_schema()
    first = PostgresArchive(postgres_server.dsn, schema=schema)
    reader = psycopg.connect(postgres_server.dsn, autocommit=False)
    try:
        reader.execute(f'SET search_path TO "{schema}"')
        reader.execute("SELECT count(*) FROM graph_facts").fetchall()  # its transaction stays open
        reader.execute("INSERT INTO diary (app, user_id, id, agent, text, topic, written_us, route)"
                       " VALUES ('app', 'ann', 'd1', 'agent', 'note', 'general', 1, 0)")  # uncommitted
        opened: list[PostgresArchive] = []
        start = threading.Thread(target=lambda: opened.append(PostgresArchive(postgres_server.dsn, schema=schema)),
                                 daemon=True)
        start.start()
        start.join(30)
        assert opened, "opening the archive waited for the open transaction"
        opened[0].close()
    finally:
        reader.rollback()
        reader.close()
        first.close()
