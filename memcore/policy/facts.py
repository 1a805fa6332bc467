"""Applying an extractor's knowledge-graph fact operations (:class:`memcore.graph.FactOperation`) like memory
operations: in order, each on its own (a failed one is recorded and the later ones continue), written by
deterministic code (:class:`memcore.knowledge.KnowledgeGraph`), never by the model.

An operation without a start (``valid_from``) or an end (``ended``) takes the time of the delta being
extracted (``when``: its newest turn) for a supersede or an invalidate, so "I moved to Lisbon" closes the old
city at the message's time; an add without a start records a fact whose start is unknown. Each fact cites the
delta's turns as ``<session>/<event_id>`` refs (:mod:`memcore.provenance`), so erasing those turns erases it.

A re-extraction holds its operations back (:class:`DeferredFacts`): the graph is not generational, so they
reach it when reads switch to the new generation, in the order they were proposed, and not at all when the
run is aborted.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from memcore.errors import MemoryServiceError
from memcore.graph import FactOperation
from memcore.knowledge import KnowledgeGraph
from memcore.model import UserKey
from memcore.provenance import event_ref
from memcore.vocabulary import FactOperationType

_FIELDS = {"add": ("subject", "predicate", "object", "valid_from", "valid_to", "confidence"),
           "supersede": ("subject", "predicate", "object", "valid_from", "valid_to", "confidence"),
           "invalidate": ("subject", "predicate", "object", "ended")}


class FactResult(BaseModel):
    """What happened to one proposed fact operation."""

    index: int
    type: FactOperationType
    status: Literal["applied", "skipped", "failed"]
    fact_id: str | None = None
    closed: int = 0
    """Fact versions ended by a supersede or an invalidate."""
    error: str | None = None


def apply_facts(kg: KnowledgeGraph, key: UserKey, session: str, ops: Sequence[FactOperation],
                when: datetime) -> list[FactResult]:
    out: list[FactResult] = []
    for i, op in enumerate(ops, 1):
        spec = {k: v for k, v in op.fact.items() if k in _FIELDS[op.type] and v not in (None, "")}
        unknown = sorted(set(op.fact) - set(_FIELDS[op.type]))
        try:
            if unknown:
                raise MemoryServiceError(f"unknown argument(s) {', '.join(unknown)}", field="arguments")
            turns = list(dict.fromkeys(event_ref(session, t) for t in op.turns))
            if op.type == "invalidate":
                closed = kg.invalidate(key, {"ended": when, **spec})
                out.append(FactResult(index=i, type=op.type, status="applied" if closed else "skipped",
                                      fact_id=closed[0].fact_id if closed else None, closed=len(closed)))
                continue
            if op.type == "supersede":
                fact, ended, created = kg.supersede(key, {"valid_from": when, **spec, "turns": turns},
                                                    writer="extractor")
                out.append(FactResult(index=i, type=op.type, status="applied" if created or ended else "skipped",
                                      fact_id=fact.fact_id, closed=len(ended)))
                continue
            fact, created = kg.add(key, {**spec, "turns": turns}, writer="extractor")
            out.append(FactResult(index=i, type=op.type, status="applied" if created else "skipped",
                                  fact_id=fact.fact_id))
        except MemoryServiceError as exc:
            out.append(FactResult(index=i, type=op.type, status="failed", error=str(exc)))
    return out


@dataclass
class DeferredFacts:
    """One user's fact operations held back, each batch with the session and time it was proposed for."""

    batches: list[tuple[str, list[FactOperation], datetime]] = field(default_factory=list)

    def hold(self, session: str, ops: Sequence[FactOperation], when: datetime) -> None:
        self.batches.append((session, list(ops), when))

    def count(self) -> int:
        return sum(len(ops) for _, ops, _ in self.batches)

    def apply(self, kg: KnowledgeGraph, key: UserKey, gone: Collection[tuple[str, str]] = ()) -> list[FactResult]:
        """Apply every batch in order, leaving out the operations that cite a turn in ``gone`` ((session,
        event id) pairs: erased, hidden or removed since they were proposed)."""
        out: list[FactResult] = []
        for session, ops, when in self.batches:
            kept = [op for op in ops if not any((session, t) in gone for t in op.turns)]
            out += apply_facts(kg, key, session, kept, when)
        return out
