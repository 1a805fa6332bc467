"""The knowledge graph and the diary (memcore.graph rules, memcore.knowledge operations) over each real
archive engine (SQLite; PostgreSQL on the private server of tests/conftest.py): idempotent adds, supersede,
invalidate, bi-temporal reads, neighbourhoods, limits, erasure."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memcore.archive_ports import EventArchive
from memcore.errors import NotFoundError, ValidationError
from memcore.graph import MAX_HOPS, entity_key, predicate_key
from memcore.knowledge import KnowledgeGraph, fact_json
from memcore.model import UserKey
from memcore.stores.postgres_archive import PostgresArchive
from memcore.stores.sqlite_archive import SqliteArchive
from tests.conftest import pg_schema

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw: float) -> datetime:
        self.t += timedelta(**kw)
        return self.t


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], EventArchive]:
    """Opens the same archive of the engine each time (an SQLite file; a PostgreSQL schema of its own)."""
    if request.param == "sqlite":
        return lambda: SqliteArchive(tmp_path / "archive.sqlite3", tmp_path / "seq.sqlite3")
    server = request.getfixturevalue("postgres_server")
    schema = pg_schema()
    return lambda: PostgresArchive(server.dsn, schema=schema)


@pytest.fixture
def archive(opener: Callable[[], EventArchive]) -> Iterator[EventArchive]:
    a = opener()
    yield a
    a.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kg(archive: EventArchive, clock: Clock) -> KnowledgeGraph:
    return KnowledgeGraph(archive.graph, archive.diary, clock=clock)


def triples(facts) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    return [(f.subject_name, f.predicate, f.object_name) for f in facts]


def test_keys_normalise_case_space_and_separators() -> None:
    assert entity_key("  Alice   SMITH ") == "alice smith"
    assert predicate_key(" Lives In ") == predicate_key("lives-in") == "lives_in"


def test_add_is_idempotent_and_merges_sources(kg: KnowledgeGraph, archive: EventArchive, clock: Clock) -> None:
    f1, new1 = kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "Italian food"})
    clock.advance(seconds=5)
    f2, new2 = kg.add(A, {"subject": " alice ", "predicate": "Likes", "object": "italian  FOOD"})
    assert new1 and not new2 and f1 == f2
    assert archive.graph.count(A) == 1
    clock.advance(seconds=5)
    f3, new3 = kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "Italian food", "memories": ["m1"]})
    assert not new3 and f3.fact_id == f1.fact_id and f3.memories == ["m1"]
    assert archive.graph.count(A) == 1  # the old version is retired, one fact believed
    assert len(kg.history(A, "alice")) == 2
    assert kg.query(B, {"entity": "Alice"}) == []  # the user scope is a hard filter


def test_supersede_closes_old_and_opens_new_at_the_same_instant(kg: KnowledgeGraph, clock: Clock) -> None:
    kg.add(A, {"subject": "Alice", "predicate": "lives in", "object": "Paris", "valid_from": "2024-01-01"})
    clock.advance(days=7)
    new, closed, created = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon",
                                   "valid_from": "2025-01-08"})
    assert created and [c.object_name for c in closed] == ["Paris"]
    assert closed[0].valid_to == new.valid_from == datetime(2025, 1, 8, tzinfo=UTC)
    now = kg.query(A, {"entity": "alice", "as_of": "2025-02-01"})
    assert triples(now) == [("Alice", "lives_in", "Lisbon")]
    then = kg.query(A, {"entity": "alice", "as_of": "2024-06-01"})
    assert triples(then) == [("Alice", "lives_in", "Paris")]
    current = [fact_json(f, clock()) for f in kg.query(A, {"entity": "Alice"})]
    assert [(c["object"], c["current"]) for c in current] == [("Paris", False), ("Lisbon", True)]
    again, closed2, created2 = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon"})
    assert closed2 == [] and not created2 and again.id == new.id  # superseding with the current object changes nothing


def test_bitemporal_record_time_answers_what_was_believed(kg: KnowledgeGraph, clock: Clock) -> None:
    t_add = clock()
    kg.add(A, {"subject": "Alice", "predicate": "works_at", "object": "Acme"})
    clock.advance(days=30)
    kg.invalidate(A, {"subject": "Alice", "predicate": "works_at", "object": "Acme", "ended": "2025-01-15"})
    believed_then = kg.query(A, {"entity": "Alice", "known_at": (t_add + timedelta(days=1)).isoformat()})
    assert len(believed_then) == 1 and believed_then[0].valid_to is None
    believed_now = kg.query(A, {"entity": "Alice"})
    assert len(believed_now) == 1 and believed_now[0].valid_to == datetime(2025, 1, 15, tzinfo=UTC)
    assert kg.query(A, {"entity": "Alice", "as_of": "2025-01-20"}) == []
    assert len(kg.history(A, "Alice")) == 2  # history kept


def test_invalidate_unknown_is_a_noop_and_inverted_end_is_refused(kg: KnowledgeGraph) -> None:
    assert kg.invalidate(A, {"subject": "Nobody", "predicate": "likes", "object": "x"}) == []
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "tea", "valid_from": "2024-05-01"})
    with pytest.raises(ValidationError) as exc:
        kg.invalidate(A, {"subject": "Alice", "predicate": "likes", "object": "tea", "ended": "2024-01-01"})
    assert exc.value.field == "ended"
    assert len(kg.history(A, "Alice")) == 1  # nothing written


@pytest.mark.parametrize(("fact", "field"), [
    ({"subject": "  ", "predicate": "p", "object": "o"}, "subject"),
    ({"subject": "s", "predicate": " - ", "object": "o"}, "predicate"),
    ({"subject": "s", "predicate": "p", "object": ""}, "object"),
    ({"subject": "s", "predicate": "p", "object": "o", "valid_from": "yesterday"}, "valid_from"),
    ({"subject": "s", "predicate": "p", "object": "o", "valid_from": "2025-02-01", "valid_to": "2025-01-01"},
     "valid_to"),
    ({"subject": "s" * 201, "predicate": "p", "object": "o"}, "subject"),
    ({"subject": "s", "predicate": "p" * 101, "object": "o"}, "predicate"),
    ({"subject": "s", "predicate": "p", "object": "o", "confidence": 1.5}, "confidence"),
])
def test_bad_facts_are_refused_naming_the_field(kg: KnowledgeGraph, archive: EventArchive,
                                               fact: dict[str, object], field: str | None) -> None:
    with pytest.raises(ValidationError) as exc:
        kg.add(A, fact)
    assert exc.value.field == field
    if field == "valid_to":
        assert "before valid_from" in exc.value.message
    assert archive.graph.facts(A) == [] and archive.graph.entities(A) == []


def test_aliases_resolve_and_conflicts_are_refused(kg: KnowledgeGraph) -> None:
    kg.add(A, {"subject": "Robert Smith", "predicate": "plays", "object": "guitar", "subject_type": "person"})
    ent = kg.declare(A, {"name": "robert smith", "aliases": ["Bob", "Bobby"]})
    assert ent.name == "Robert Smith" and ent.type == "person" and ent.aliases == ["Bob", "Bobby"]
    assert triples(kg.query(A, {"entity": " BOB "})) == [("Robert Smith", "plays", "guitar")]
    kg.add(A, {"subject": "bobby", "predicate": "plays", "object": "piano"})
    got = kg.query(A, {"entity": "Robert Smith"})
    assert {f.object_name for f in got} == {"guitar", "piano"}
    assert {f.subject_name for f in got} == {"Robert Smith"}  # an alias leads to the entity's own name
    kg.add(A, {"subject": "Alice", "predicate": "knows", "object": "Bob"})
    with pytest.raises(ValidationError) as exc:
        kg.declare(A, {"name": "Alice", "aliases": ["bob"]})
    assert exc.value.field == "aliases"


def test_directions_predicates_and_timeline(kg: KnowledgeGraph, clock: Clock) -> None:
    kg.add(A, {"subject": "Alice", "predicate": "manages", "object": "Bob", "valid_from": "2023-01-01"})
    kg.add(A, {"subject": "Carol", "predicate": "mentors", "object": "Alice", "valid_from": "2022-01-01"})
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "tea", "valid_from": "2024-01-01"})
    assert triples(kg.query(A, {"entity": "alice", "direction": "incoming"})) == [("Carol", "mentors", "Alice")]
    assert {f.predicate for f in kg.query(A, {"entity": "alice", "direction": "outgoing"})} == {"manages", "likes"}
    assert triples(kg.query(A, {"entity": "alice", "predicate": "Likes"})) == [("Alice", "likes", "tea")]
    assert [f.predicate for f in kg.timeline(A, "Alice")] == ["mentors", "manages", "likes"]
    assert len(kg.timeline(A)) == 3
    assert kg.query(A, {"entity": "Zed"}) == [] and kg.timeline(A, "Zed") == []


def test_neighbourhood_is_bounded_by_hops(kg: KnowledgeGraph) -> None:
    chain = ["A0", "A1", "A2", "A3", "A4", "A5"]
    for a, b in itertools.pairwise(chain):
        kg.add(A, {"subject": a, "predicate": "next", "object": b})
    one = kg.neighbourhood(A, {"entity": "a0", "hops": 1})
    assert [(e["entity"], e["hops"]) for e in one["entities"]] == [("A0", 0), ("A1", 1)]
    three = kg.neighbourhood(A, {"entity": "A0", "hops": 3})
    assert [e["entity"] for e in three["entities"]] == ["A0", "A1", "A2", "A3"]
    assert len(three["facts"]) == 3
    with pytest.raises(ValidationError) as exc:
        kg.neighbourhood(A, {"entity": "A0", "hops": MAX_HOPS + 1})
    assert exc.value.field == "hops"
    assert kg.neighbourhood(A, {"entity": "nobody"})["entities"] == []


def test_fact_limit_per_user(archive: EventArchive, clock: Clock) -> None:
    kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock, max_facts=2)
    kg.add(A, {"subject": "a", "predicate": "p", "object": "1"})
    kg.add(A, {"subject": "a", "predicate": "p", "object": "2"})
    kg.add(A, {"subject": "a", "predicate": "p", "object": "2"})  # idempotent: no room needed
    with pytest.raises(ValidationError) as exc:
        kg.add(A, {"subject": "a", "predicate": "p", "object": "3"})
    assert exc.value.field == "facts"
    kg.add(B, {"subject": "a", "predicate": "p", "object": "3"})  # per user


def test_drop_sources_removes_only_facts_with_no_other_source(kg: KnowledgeGraph, archive: EventArchive) -> None:
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "tea", "memories": ["m1"]})
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "coffee", "memories": ["m1", "m2"]})
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "jazz", "turns": ["s1/e1"]})
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "cats"})
    assert kg.drop_sources(A, memories={"m1"}) == 1
    assert {f.object_name for f in kg.query(A, {"entity": "Alice"})} == {"coffee", "jazz", "cats"}
    assert kg.drop_sources(A, turns={"s1/e1"}) == 1
    line = kg.query(A, {"entity": "Alice", "predicate": "likes"})[0].fact_id
    assert kg.delete_fact(A, line) == 1
    with pytest.raises(NotFoundError):
        kg.delete_fact(A, line)


def lives(kg: KnowledgeGraph, as_of: str | None = None) -> list[tuple[str, str | None, str | None]]:
    """Alice's believed ``lives_in`` facts: (object, valid_from, valid_to) dates, in record order."""
    query = {"entity": "Alice", "predicate": "lives_in", **({"as_of": as_of} if as_of else {})}
    def day(t: datetime | None) -> str | None:
        return None if t is None else t.date().isoformat()

    return [(f.object_name, day(f.valid_from), day(f.valid_to)) for f in kg.query(A, query)]


def test_deleting_a_supersede_opens_again_what_it_ended(kg: KnowledgeGraph, clock: Clock) -> None:
    """"I moved to Lisbon" was wrong: erasing that turn (or deleting its fact) leaves Porto current again,
    with its history kept; a later supersede that stands (Berlin) bounds it instead."""
    kg.add(A, {"subject": "Alice", "predicate": "lives_in", "object": "Porto", "valid_from": "2020-01-01",
               "turns": ["s1/e1"]})
    clock.advance(days=1)
    lisbon, closed, _ = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon",
                                         "valid_from": "2024-03-01", "turns": ["s2/e1"]})
    assert [c.ended_by for c in closed] == [lisbon.fact_id]
    clock.advance(days=1)
    assert kg.drop_sources(A, turns={"s2/e1"}) == 1  # the Lisbon line, one version
    assert lives(kg) == [("Porto", "2020-01-01", None)]
    assert lives(kg, "2025-01-01") == [("Porto", "2020-01-01", None)]
    assert [f.valid_to for f in kg.history(A, "Alice", "lives_in")][-2:] == [datetime(2024, 3, 1, tzinfo=UTC), None]
    # Porto -> Lisbon -> Berlin, then Lisbon's line deleted by id: Porto holds until Berlin
    clock.advance(days=1)
    lisbon, _, _ = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon",
                                    "valid_from": "2024-03-01", "turns": ["s3/e1"]})
    clock.advance(days=1)
    berlin, closed, _ = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Berlin",
                                         "valid_from": "2025-06-01", "turns": ["s4/e1"]})
    assert [(c.object_name, c.ended_by) for c in closed] == [("Lisbon", berlin.fact_id)]
    clock.advance(days=1)
    assert kg.delete_fact(A, lisbon.fact_id) == 2  # its first version and the one Berlin closed
    assert sorted(lives(kg)) == [("Berlin", "2025-06-01", None), ("Porto", "2020-01-01", "2025-06-01")]
    porto = next(f for f in kg.query(A, {"entity": "Alice", "predicate": "lives_in"}) if f.object_name == "Porto")
    assert porto.ended_by == berlin.fact_id  # so deleting Berlin too opens Porto once more
    clock.advance(days=1)
    kg.delete_fact(A, berlin.fact_id)
    assert lives(kg) == [("Porto", "2020-01-01", None)]


def test_an_end_not_written_by_a_deleted_supersede_stays(kg: KnowledgeGraph, clock: Clock) -> None:
    """An invalidate's end, an end given with the fact, and a plain add of another object are not undone."""
    kg.add(A, {"subject": "Alice", "predicate": "lives_in", "object": "Porto", "valid_from": "2020-01-01"})
    clock.advance(days=1)
    kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon", "valid_from": "2024-03-01",
                     "memories": ["m1"]})
    clock.advance(days=1)
    kg.invalidate(A, {"subject": "Alice", "predicate": "lives_in", "object": "Porto", "ended": "2023-01-01"})
    kg.add(A, {"subject": "Alice", "predicate": "works_at", "object": "Acme", "valid_to": "2024-01-01",
               "memories": ["m2"]})
    kg.add(A, {"subject": "Alice", "predicate": "works_at", "object": "Initech", "memories": ["m1"]})
    clock.advance(days=1)
    assert kg.drop_sources(A, memories={"m1", "m2"}) == 3
    assert lives(kg) == [("Porto", "2020-01-01", "2023-01-01")]  # the invalidate re-ended it: kept
    assert kg.query(A, {"entity": "Alice", "predicate": "works_at"}) == []


def test_facts_stored_before_ended_by_existed_are_read_and_a_reopened_archive_gains_it(
        opener: Callable[[], EventArchive], clock: Clock) -> None:
    """The migration: an archive whose ``graph_facts`` has no ``ended_by`` column gets it when opened, its facts
    read as ended by no supersede (so nothing of theirs is reopened), and new supersedes record it."""
    archive = opener()
    KnowledgeGraph(archive.graph, archive.diary, clock=clock).add(
        A, {"subject": "Alice", "predicate": "lives_in", "object": "Porto", "turns": ["s1/e1"]})
    with archive._db.tx() as tx:  # type: ignore[attr-defined]
        tx.execute("ALTER TABLE graph_facts DROP COLUMN ended_by")  # as an older version wrote it
        if isinstance(archive, PostgresArchive):
            tx.execute("DROP TABLE schema_digest")  # which made no digest
    archive.close()
    archive = opener()
    try:
        kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock)
        assert [(f.object_name, f.ended_by) for f in kg.query(A, {"entity": "Alice"})] == [("Porto", None)]
        clock.advance(days=1)
        lisbon, _, _ = kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon",
                                        "turns": ["s2/e1"]})
        assert [c.ended_by for c in archive.graph.facts(A, believed_only=True) if c.object_name == "Porto"] == [
            lisbon.fact_id]
    finally:
        archive.close()


def test_current_facts_of_entities_named_in_text(kg: KnowledgeGraph, clock: Clock) -> None:
    kg.add(A, {"subject": "Alice", "predicate": "lives_in", "object": "Paris"})
    clock.advance(days=1)
    kg.supersede(A, {"subject": "Alice", "predicate": "lives_in", "object": "Lisbon"})
    kg.add(A, {"subject": "New York", "predicate": "is_in", "object": "USA"})
    assert triples(kg.current_for_text(A, "Where does alice live now?")) == [("Alice", "lives_in", "Lisbon")]
    assert triples(kg.current_for_text(A, "trip to new   york!")) == [("New York", "is_in", "USA")]
    assert kg.current_for_text(A, "nothing known here") == []


def test_diary_is_per_agent_newest_first_with_limit_and_range(kg: KnowledgeGraph, clock: Clock) -> None:
    for i in range(5):
        kg.write_diary(A, {"agent": "planner", "text": f"note {i}", "topic": "work" if i % 2 else "general"})
        clock.advance(hours=1)
    kg.write_diary(A, {"agent": "coder", "text": "other agent"})
    entries, total = kg.read_diary(A, {"agent": "planner", "limit": 2})
    assert total == 5 and [e.text for e in entries] == ["note 4", "note 3"]
    ranged, n = kg.read_diary(A, {"agent": "planner", "since": "2025-01-01T01:00:00",
                                  "until": "2025-01-01T02:30:00"})
    assert n == 2 and [e.text for e in ranged] == ["note 2", "note 1"]
    assert kg.read_diary(B, {"agent": "planner"}) == ([], 0)
    with pytest.raises(ValidationError) as exc:
        kg.write_diary(A, {"agent": "planner", "text": "   "})
    assert exc.value.field == "text"
    with pytest.raises(ValidationError) as exc:
        kg.read_diary(A, {"agent": "planner", "limit": 0})
    assert exc.value.field == "limit"


def test_erase_user_and_reopen(opener: Callable[[], EventArchive], clock: Clock) -> None:
    archive = opener()
    kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock)
    kg.add(A, {"subject": "Alice", "predicate": "likes", "object": "tea"})
    kg.add(B, {"subject": "Bob", "predicate": "likes", "object": "tea"})
    kg.write_diary(A, {"text": "hello"})
    archive.close()
    archive = opener()  # reopening keeps the graph
    kg = KnowledgeGraph(archive.graph, archive.diary, clock=clock)
    assert len(kg.query(A, {"entity": "alice"})) == 1
    counts = archive.erase_user(A)
    assert counts["graph_facts"] == 1 and counts["graph_entities"] == 2 and counts["diary"] == 1
    assert kg.query(A, {"entity": "alice"}) == [] and kg.read_diary(A, {}) == ([], 0)
    assert len(kg.query(B, {"entity": "bob"})) == 1
    archive.close()
