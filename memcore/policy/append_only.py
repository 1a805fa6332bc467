"""append_only: never lose an old value; changes coexist and retrieval combines them.

- add and update: written as a new entry (update → add); an exact duplicate of an active entry
  (same canonical id: same normalised text, kind, event time, participants, location) is dropped;
- delete / clear proposed by the extractor: skipped.
"""

from __future__ import annotations

from memcore.model import Operation
from memcore.policy.plan import Plan, Store


def plan(op: Operation, store: Store) -> Plan:
    if op.type in ("delete", "clear"):
        return Plan("skip", target=op.memory_id, reason=f"append_only skips extractor {op.type}")
    mem = op.memory
    assert mem is not None
    same = store.same(mem)
    if same is not None:
        return Plan("skip", target=same.id, reason=f"exact duplicate of {same.id}")
    reason = f"append_only turns update of {op.memory_id} into add" if op.type == "update" else ""
    return Plan("add", mem, reason=reason)
