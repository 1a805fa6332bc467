"""preserve_history: keep every earlier detail; merge only non-conflicting additions (seed 000, 2.2).

For an add (and for an update, against its target first):

1. an exact duplicate (same normalised text, kind, event time, participants and location;
   topics ignored) is skipped;
2. an entry is enriched in place only when every check of :func:`enrich_failure` passes —
   same kind, same day, same location, participants a superset, old-token coverage >= 0.95,
   new-token share >= 0.70, every number and negation kept, no new change marker ("now",
   "no longer", "instead", ...), old tokens in order;
3. otherwise the old entry is kept and the content is added as a new entry.

An update whose target is missing or fails a check becomes an add (the old text is never
replaced). Delete and clear are applied as proposed (the prompt asks for delete only on an
explicit request to forget).
"""

from __future__ import annotations

from memcore.model import Entry, Memory, Operation
from memcore.policy.plan import Plan, Store, union
from memcore.text import change_markers, coverage, in_order, negations, normalize, numbers, word_set

MIN_COVERAGE = 0.95
MIN_NEW_SHARE = 0.70


def is_exact_duplicate(old: Entry | Memory, new: Memory) -> bool:
    """Same normalised text and event information (topics, source and provenance ignored)."""
    return (
        normalize(old.text) == normalize(new.text)
        and old.kind == new.kind
        and old.event_time == new.event_time
        and _people(old) == _people(new)
        and normalize(old.location or "") == normalize(new.location or "")
    )


def new_share(old: str, new: str) -> float:
    """Share of the new text's distinct tokens that the old text already has."""
    so, sn = word_set(old), word_set(new)
    if not sn:
        return 1.0
    return len(so & sn) / len(sn)


def enrich_failure(old: Entry | Memory, new: Memory) -> str | None:
    """Why ``new`` cannot enrich ``old`` in place (the first failing check), or None when it can."""
    if old.kind != new.kind:
        return f"different kind ({old.kind.value} vs {new.kind.value})"
    if (old.event_time is None) != (new.event_time is None) or (
        old.event_time is not None and new.event_time is not None and old.event_time.date() != new.event_time.date()
    ):
        return "different day"
    if normalize(old.location or "") != normalize(new.location or ""):
        return "different location"
    dropped = _people(old) - _people(new)
    if dropped:
        return f"participants dropped: {', '.join(sorted(dropped))}"
    cov = coverage(old.text, new.text)
    if cov < MIN_COVERAGE:
        return f"old-token coverage {cov:.2f} < {MIN_COVERAGE}"
    share = new_share(old.text, new.text)
    if share < MIN_NEW_SHARE:
        return f"new-token share {share:.2f} < {MIN_NEW_SHARE}"
    new_numbers = numbers(new.text)
    lost = [n for n in numbers(old.text) if n not in new_numbers]
    if lost:
        return f"number(s) dropped: {', '.join(lost)}"
    if set(negations(old.text)) != set(negations(new.text)):
        return "negation changed"
    markers = change_markers(new.text) - change_markers(old.text)
    if markers:
        return f"new change marker(s): {', '.join(sorted(markers))}"
    if not in_order(old.text, new.text):
        return "old tokens out of order"
    return None


def enriched(old: Entry, new: Memory) -> Memory:
    """The memory that replaces ``old``: the new content with the topics of both."""
    return new.model_copy(update={"topics": union(old.topics, new.topics)})


def plan(op: Operation, store: Store) -> Plan:
    if op.type == "delete":
        return Plan("delete", target=op.memory_id)
    if op.type == "clear":
        return Plan("clear")
    mem = op.memory
    assert mem is not None
    same = store.same(mem)
    if same is not None:
        return Plan("skip", target=same.id, reason=f"exact duplicate of {same.id}")
    note = ""
    if op.type == "update":
        assert op.memory_id is not None
        target = store.get(op.memory_id)
        if target is None:
            note = f"update target {op.memory_id} not found"
        else:
            failure = enrich_failure(target, mem)
            if failure is None:
                return Plan("update", enriched(target, mem), target.id, f"enriches {target.id}")
            note = f"update of {target.id} is not an enrichment ({failure}); kept it"
    return _add(mem, store, note)


def _add(mem: Memory, store: Store, note: str) -> Plan:
    candidates = store.candidates(mem)
    prefix = f"{note}; " if note else ""
    if candidates is None:
        return Plan("add", mem, reason=f"{prefix}candidate search failed; added as a new entry")
    failures: list[str] = []
    for hit in candidates:
        if is_exact_duplicate(hit.entry, mem):
            return Plan("skip", target=hit.entry.id, reason=f"{prefix}exact duplicate of {hit.entry.id}")
        failure = enrich_failure(hit.entry, mem)
        if failure is None:
            return Plan("update", enriched(hit.entry, mem), hit.entry.id, f"{prefix}enriches {hit.entry.id}")
        failures.append(f"{hit.entry.id[:12]}: {failure}")
    why = f" (kept {'; '.join(failures)})" if failures else ""
    return Plan("add", mem, reason=f"{prefix}added as a new entry{why}")


def _people(m: Entry | Memory) -> set[str]:
    return {normalize(p) for p in m.participants}
