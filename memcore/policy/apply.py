"""Apply proposed operations one by one through an update policy; deterministic code owns the write.

Each operation is planned by the policy (:mod:`merge_similar`, :mod:`append_only`,
:mod:`preserve_history`) against the live store, then executed. A failing operation is
recorded (``status="failed"`` with the error) and the later ones continue; nothing is rolled
back. Later operations see the writes of earlier ones, and an operation that targets an id an
earlier update rotated away is redirected to the effective id.

``enabled`` is the set of operation types the deployment allows (Auto-mode defaults: add,
update, delete; clear off). A planned update with update disabled falls back to adding the
proposed add; other disabled actions (an extractor update included) are skipped with a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Literal

from memcore import tracing
from memcore.errors import MemoryServiceError, NotFoundError, ValidationError
from memcore.ids import memory_id
from memcore.model import Entry, Memory, Operation, UserKey
from memcore.policy import append_only, merge_similar, preserve_history
from memcore.policy.plan import Plan, Store
from memcore.policy.reconcile import search_candidates
from memcore.records import OpResult
from memcore.search_model import SearchHit
from memcore.service import MemoryService
from memcore.vocabulary import DEFAULT_POLICY

DEFAULT_ENABLED: frozenset[str] = frozenset({"add", "update", "delete"})
PLANNERS: dict[str, Callable[[Operation, Store], Plan]] = {
    "merge_similar": merge_similar.plan,
    "append_only": append_only.plan,
    "preserve_history": preserve_history.plan,
}


class ServiceStore:
    """:class:`memcore.policy.plan.Store` over a MemoryService, for one user."""

    def __init__(self, service: MemoryService, key: UserKey, enabled: Collection[str]) -> None:
        self.service = service
        self.key = key
        self.enabled = frozenset(enabled)

    @property
    def update_enabled(self) -> bool:
        return "update" in self.enabled

    @property
    def add_enabled(self) -> bool:
        return "add" in self.enabled

    def get(self, entry_id: str) -> Entry | None:
        try:
            return self.service.get(self.key, entry_id)
        except NotFoundError:
            return None

    def same(self, memory: Memory) -> Entry | None:
        return self.get(memory_id(self.key, memory))

    def candidates(self, memory: Memory) -> list[SearchHit] | None:
        return search_candidates(self.service, self.key, memory)


def apply_operations(
    service: MemoryService,
    key: UserKey,
    ops: Sequence[Operation],
    policy_name: str = DEFAULT_POLICY,
    *,
    enabled: Collection[str] | None = None,
) -> list[OpResult]:
    """Plan and execute ``ops`` in order; one result per operation, failures included."""
    planner = PLANNERS.get(policy_name)
    if planner is None:
        raise ValidationError(f"unknown policy {policy_name!r} (one of {', '.join(PLANNERS)})", field="policy")
    store = ServiceStore(service, key, DEFAULT_ENABLED if enabled is None else enabled)
    renamed: dict[str, str] = {}
    results: list[OpResult] = []
    for i, op in enumerate(ops):
        if op.memory_id and op.memory_id in renamed:
            op = op.model_copy(update={"memory_id": _follow(renamed, op.memory_id)})
        result = OpResult(index=i, type=op.type, status="failed", memory_id=op.memory_id)
        try:
            plan = _gate(planner(op, store), op, store)
            result.action, result.reason = plan.action, plan.reason or None
            result.memory_id = plan.target or op.memory_id
            with tracing.span(tracing.WRITE_SPANS.get(plan.action, "memcluster.skip"), memcluster__app=key.app):
                result.effective_id, result.status, extra = _execute(service, key, plan)
            if extra:
                result.reason = f"{result.reason}; {extra}" if result.reason else extra
            if plan.action == "update" and plan.target and result.effective_id and result.effective_id != plan.target:
                renamed[plan.target] = result.effective_id
        except MemoryServiceError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - one bad operation must not stop the batch
            result.error = f"{type(exc).__name__}: {exc}"
        results.append(result)
    return results


def _gate(plan: Plan, op: Operation, store: ServiceStore) -> Plan:
    """Apply the enabled switches to a plan."""
    if plan.action == "skip" or plan.action in store.enabled:
        return plan
    if plan.action == "update" and op.type == "add" and store.add_enabled:
        return Plan("add", op.memory, reason=_join(plan.reason, "update is disabled; kept the add"))
    return Plan("skip", target=plan.target, reason=_join(plan.reason, f"{plan.action} is disabled"))


def _execute(service: MemoryService, key: UserKey, plan: Plan) -> tuple[str | None, Literal["applied", "skipped"], str]:
    if plan.action == "skip":
        return plan.target, "skipped", ""
    if plan.action == "add":
        assert plan.memory is not None
        return service.add(key, plan.memory).id, "applied", ""
    if plan.action == "update":
        assert plan.memory is not None and plan.target is not None
        return service.update(key, plan.target, plan.memory).id, "applied", ""
    if plan.action == "delete":
        assert plan.target is not None
        service.delete(key, plan.target)
        return None, "applied", ""
    cleared = service.clear(key)
    return None, "applied", f"cleared {cleared} entries"


def _follow(renamed: dict[str, str], entry_id: str) -> str:
    seen = {entry_id}
    while entry_id in renamed and renamed[entry_id] not in seen:
        entry_id = renamed[entry_id]
        seen.add(entry_id)
    return entry_id


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b
