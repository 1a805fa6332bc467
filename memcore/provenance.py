"""Provenance refs: which archived turns a memory came from (the one home of their format and rules).

An event id is unique only within its session (clients number messages per session: ``e1``, ``e2``
in each), so a turn is (session, event id) within its user (:class:`memcore.records.Turn`) and a
memory cites it as the ref ``"<session>/<event_id>"`` (:func:`event_ref`), read back by splitting at
the first ``/`` (:func:`parse_event_ref`: session ids never contain ``/``, event ids may). Every ref
memcluster writes carries its session: live extraction, the verbatim extractor's episodes and the
assistant-episode stage, the backfill job and re-extraction all cite through :func:`cite`.

**Bare refs.** A ref without ``/`` is a bare event id: what memcluster wrote before refs carried
their session, and what a client may still put in ``provenance``. It names every archived turn of
that event id of the user, in any session (:meth:`TurnIndex.candidates`); entries and archives
written with bare ids keep working without a rewrite. When a bare id is ambiguous (two sessions of
the user hold it), the delete paths lean towards removing the text the user asked to remove and
towards keeping memories that may still have a live source:

- deleting or clearing a memory hides or removes every turn its refs may name, except the turns
  another active memory names for certain (a qualified ref, or a bare one that only one turn has):
  two memories citing the same ambiguous bare id therefore do not protect each other's turns;
- removing turns (a session, one turn) deletes the memories that cite one of them and have no ref
  left that may still name a visible turn: a memory citing bare ``e1`` stays while any session of
  the user still holds a visible ``e1``;
- the generations of a re-extraction drop a staged entry when one of its refs names a removed turn
  and may name no visible one (:meth:`TurnIndex.derived`).

With qualified refs every one of these rules is exact.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from memcore.model import Operation
from memcore.records import ArchivedTurn, Turn

SEPARATOR = "/"


class Ref(NamedTuple):
    """A parsed provenance ref: ``session`` is None for a bare event id."""

    session: str | None
    event_id: str


def event_ref(session: str, event_id: str) -> str:
    """The provenance ref of the turn ``event_id`` of ``session``."""
    return f"{session}{SEPARATOR}{event_id}"


def parse_event_ref(ref: str) -> Ref:
    """``"<session>/<event_id>"`` split at the first ``/``; a ref without one is a bare event id."""
    session, sep, event_id = ref.partition(SEPARATOR)
    if not sep or not session or not event_id:
        return Ref(None, ref)
    return Ref(session, event_id)


def cite(session: str, operations: Sequence[Operation]) -> list[Operation]:
    """The operations of an extraction of ``session``'s delta with the event ids in their provenance made
    refs of that session (extractors cite the delta's event ids)."""
    out: list[Operation] = []
    for op in operations:
        if op.memory is not None and op.memory.provenance:
            refs = list(dict.fromkeys(event_ref(session, p) for p in op.memory.provenance))
            op = op.model_copy(update={"memory": op.memory.model_copy(update={"provenance": refs})})
        out.append(op)
    return out


def event_ids(refs: Iterable[str]) -> set[str]:
    """The event ids that ``refs`` name (what to look up in the archive to resolve them)."""
    return {parse_event_ref(r).event_id for r in refs}


class TurnIndex:
    """A user's archived turns (some or all of them) by event id, with whether each is visible: what refs
    resolve against (the rules are the module docstring's). A turn given twice keeps its last state."""

    def __init__(self, turns: Iterable[ArchivedTurn]) -> None:
        self._visible: dict[Turn, bool] = {}
        self._by_id: dict[str, set[Turn]] = {}
        for t in turns:
            turn = Turn(t.session, t.event_id)
            self._visible[turn] = t.visible
            self._by_id.setdefault(turn.event_id, set()).add(turn)

    def turns(self) -> set[Turn]:
        return set(self._visible)

    def candidates(self, ref: str) -> set[Turn]:
        """The turns ``ref`` may name: its own turn, or for a bare ref every turn of that event id."""
        session, event_id = parse_event_ref(ref)
        if session is None:
            return set(self._by_id.get(event_id, ()))
        turn = Turn(session, event_id)
        return {turn} if turn in self._visible else set()

    def named(self, refs: Iterable[str]) -> set[Turn]:
        """Every turn one of ``refs`` may name."""
        return {t for r in refs for t in self.candidates(r)}

    def certain(self, refs: Iterable[str]) -> set[Turn]:
        """The turns ``refs`` name without doubt (a qualified ref; a bare ref that only one turn has)."""
        out: set[Turn] = set()
        for r in refs:
            found = self.candidates(r)
            if len(found) == 1:
                out |= found
        return out

    def live(self, refs: Iterable[str], dropping: Collection[Turn] = ()) -> bool:
        """Whether one of ``refs`` may name a visible turn outside ``dropping``."""
        return any(self._visible[t] and t not in dropping for r in refs for t in self.candidates(r))

    def sourceless(self, refs: Sequence[str], dropping: Collection[Turn]) -> bool:
        """Whether an entry citing ``refs`` loses its last source when ``dropping`` goes: it cites one of them
        and no ref may still name a visible turn."""
        return any(t in dropping for t in self.named(refs)) and not self.live(refs, dropping)

    def derived(self, refs: Iterable[str], gone: Collection[Turn]) -> bool:
        """Whether an entry citing ``refs`` was made from a turn of ``gone``: one ref names a turn of ``gone``
        and may name no turn that is visible outside it."""
        for r in refs:
            found = self.candidates(r)
            if any(t in gone for t in found) and not any(self._visible[t] and t not in gone for t in found):
                return True
        return False
