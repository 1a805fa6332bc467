"""What deleting a superseding fact undoes: the ends its supersede gave other facts.

A supersede (:meth:`memcore.knowledge.KnowledgeGraph.supersede`) ends the open facts of a subject and
predicate where the new object starts, and each closed version names the new line in ``ended_by``. When
that line is deleted (its sources erased, or the line deleted by id), each fact it ended is open again as it
was before that supersede (its earlier ``valid_to``, often none). A later supersede of the same subject and
predicate that still stands then bounds it instead: Porto → Lisbon → Berlin with Lisbon deleted leaves Porto
until Berlin. A supersede counts as one when it ended some fact (an ``ended_by`` names it). The change is a
new version, as every change is, so the history still shows the end that was undone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from memcore.graph import Fact


def reopened(facts: Sequence[Fact], dropped: Collection[str], at: datetime) -> tuple[list[str], list[Fact]]:
    """For one user's fact versions ``facts`` (every version: retired ones too) and the lines ``dropped``
    (``fact_id``\\ s about to be deleted): the believed versions to retire and their successors (recorded at
    ``at``) that undo the ends those lines' supersedes gave."""
    gone = set(dropped)
    lines: dict[str, list[Fact]] = {}
    for f in sorted(facts, key=lambda f: (f.recorded_at, f.id)):
        lines.setdefault(f.fact_id, []).append(f)
    live = set(lines) - gone
    standing = {f.ended_by for f in facts if f.ended_by is not None} & live
    believed = [f for f in facts if f.retired_at is None and f.fact_id not in gone]
    retire: list[str] = []
    successors: list[Fact] = []
    for f in believed:
        if f.ended_by not in gone or f.valid_to is None:
            continue
        before = [v for v in lines[f.fact_id]  # its versions whose end no deleted line gave
                  if v.recorded_at < f.recorded_at and (v.ended_by is None or v.ended_by in live)]
        end, ended_by = (before[-1].valid_to, before[-1].ended_by) if before else (None, None)
        after = f.valid_to
        later = [g for g in believed if g.fact_id in standing and g.subject == f.subject
                 and g.predicate == f.predicate and g.object != f.object and g.valid_from is not None
                 and g.valid_from >= after and (end is None or g.valid_from < end)]
        if later:
            bound = min(later, key=lambda g: (g.valid_from or after, g.fact_id))
            end, ended_by = bound.valid_from, bound.fact_id
        retire.append(f.id)
        successors.append(f.successor(at, valid_to=end, ended_by=ended_by))
    return retire, successors
