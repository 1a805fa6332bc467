"""merge_similar (the default policy): keep memory compact, the current version wins.

- add: reconciled against at most 3 similar entries (:mod:`memcore.policy.reconcile`): a
  duplicate is skipped (if it brings new topics, only the topics are added to the existing
  entry), a similar entry is updated with the new content, otherwise the add is kept; a failed
  candidate search keeps the add;
- update: applied to its target; a missing target falls back to an add (when add is enabled);
- delete / clear: applied as proposed (clear only when enabled).
"""

from __future__ import annotations

from memcore.model import Operation
from memcore.policy.plan import Plan, Store, union
from memcore.policy.reconcile import reconcile


def plan(op: Operation, store: Store) -> Plan:
    if op.type == "delete":
        return Plan("delete", target=op.memory_id)
    if op.type == "clear":
        return Plan("clear")
    mem = op.memory
    assert mem is not None
    if op.type == "update":
        assert op.memory_id is not None
        if store.get(op.memory_id) is None:
            return Plan("add", mem, reason=f"update target {op.memory_id} not found; added instead")
        return Plan("update", mem, op.memory_id)
    candidates = store.candidates(mem)
    if candidates is None:
        return Plan("add", mem, reason="reconcile search failed; kept the add")
    decision = reconcile(op, candidates, update_enabled=store.update_enabled)
    target = decision.target
    if decision.action == "skip" and target is not None:
        new_topics = [t for t in mem.topics if t not in target.topics]
        if new_topics and store.update_enabled:
            merged = target.memory().model_copy(update={"topics": union(target.topics, mem.topics)})
            return Plan("update", merged, target.id, f"{decision.reason}; added topics {new_topics}")
        return Plan("skip", target=target.id, reason=decision.reason)
    if decision.action == "update" and target is not None:
        merged = mem.model_copy(update={"topics": union(target.topics, mem.topics)})
        return Plan("update", merged, target.id, decision.reason)
    return Plan("add", mem, reason=decision.reason)
