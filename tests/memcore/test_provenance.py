"""Provenance refs (``<session>/<event_id>``) and how the delete paths resolve them, bare legacy ids
included (the rules of :mod:`memcore.provenance`)."""

from __future__ import annotations

from memcore.model import Memory, Operation
from memcore.provenance import Ref, TurnIndex, cite, event_ids, event_ref, parse_event_ref
from memcore.records import ArchivedTurn, Turn

S1, S2 = Turn("s1", "e1"), Turn("s2", "e1")


def index(*turns: tuple[str, str, str]) -> TurnIndex:
    return TurnIndex(ArchivedTurn(s, i, state) for s, i, state in turns)  # type: ignore[arg-type]


def test_a_ref_is_split_at_the_first_slash() -> None:
    assert event_ref("s1", "e1") == "s1/e1"
    assert parse_event_ref("s1/e1") == Ref("s1", "e1")
    assert parse_event_ref("s1/msg/7") == Ref("s1", "msg/7")  # event ids may hold "/", session ids may not
    assert parse_event_ref(event_ref("chat", "a/b")) == Ref("chat", "a/b")
    for bare in ("e1", "D1:3", "/e1", "s1/"):
        assert parse_event_ref(bare) == Ref(None, bare)
    assert event_ids(["s1/e1", "s2/e1", "e9"]) == {"e1", "e9"}


def test_cite_qualifies_the_provenance_of_an_extraction() -> None:
    ops = [Operation(type="add", memory=Memory(text="a", provenance=["e1", "e2", "e1"])),
           Operation(type="add", memory=Memory(text="b")), Operation(type="delete", memory_id="x" * 64)]
    cited = cite("s9", ops)
    assert [o.memory.provenance if o.memory else None for o in cited] == [["s9/e1", "s9/e2"], [], None]
    assert ops[0].memory is not None and ops[0].memory.provenance == ["e1", "e2", "e1"]  # not changed in place


def test_a_qualified_ref_names_its_own_turn_only() -> None:
    turns = index(("s1", "e1", "visible"), ("s2", "e1", "visible"))
    assert turns.candidates("s1/e1") == {S1} and turns.candidates("s3/e1") == set()
    assert turns.certain(["s2/e1"]) == {S2}
    assert turns.sourceless(["s1/e1"], {S1}) and not turns.sourceless(["s2/e1"], {S1})
    assert turns.derived(["s1/e1"], {S1}) and not turns.derived(["s2/e1"], {S1})


def test_a_bare_ref_names_every_turn_of_its_id_and_is_certain_only_when_one_has_it() -> None:
    turns = index(("s1", "e1", "visible"), ("s2", "e1", "visible"), ("s1", "e2", "visible"))
    assert turns.candidates("e1") == {S1, S2} and turns.certain(["e1", "e2"]) == {Turn("s1", "e2")}
    assert not turns.sourceless(["e1"], {S1})  # s2/e1 may still be its source: the memory stays
    assert turns.sourceless(["e1"], {S1, S2})
    assert not turns.derived(["e1"], {S1}) and turns.derived(["e1"], {S1, S2})


def test_turns_no_longer_visible_are_no_live_source() -> None:
    turns = index(("s1", "e1", "visible"), ("s2", "e1", "hidden"), ("s3", "e5", "removed"))
    assert turns.sourceless(["e1"], {S1}) and turns.derived(["e1"], {S1})
    assert not turns.live(["s3/e5"]) and turns.live(["e1"]) and not turns.live(["e1"], {S1})
    assert turns.turns() == {S1, S2, Turn("s3", "e5")}
