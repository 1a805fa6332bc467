"""LangGraph's search ``filter`` on item values, as :class:`~memclient.integrations.langgraph.MemclusterStore`
applies it (to the items of the namespace prefix, in the client).

The language is LangGraph's (its ``InMemoryStore`` and ``PostgresStore``/``SqliteStore``): every
``field: condition`` must hold (AND). A condition is

- a plain value: equality; a mapping without ``$`` operators is equality on the nested object (each of
  its keys must match), a list equality element by element;
- a mapping of operators: ``$eq``, ``$ne`` (equality), ``$gt``, ``$gte``, ``$lt``, ``$lte`` (numeric
  comparison, ``float`` of both sides; a missing or non-numeric field does not match), all of them held.

``field`` is a top-level key of the value, or, when the value has no such key, a dotted path into
nested objects (``"user.access-level"``, as the SQL stores read it). An unknown operator is a
``ValueError`` naming it, raised by :func:`check_filter` before the store reads or writes anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["OPERATORS", "check_filter", "matches"]

#: the filter operators LangGraph's stores accept
OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
_MISSING = object()


def _is_operators(condition: Any) -> bool:
    return isinstance(condition, Mapping) and any(str(k).startswith("$") for k in condition)


def check_filter(flt: Mapping[str, Any] | None) -> None:
    """Refuse an operator outside :data:`OPERATORS` (``ValueError`` naming the field and the operator)."""
    if flt is None:
        return
    if not isinstance(flt, Mapping):
        raise ValueError(f"a search filter is a mapping of value fields to conditions; got {type(flt).__name__}")
    for field, condition in flt.items():
        if _is_operators(condition):
            for op in condition:
                if op not in OPERATORS:
                    raise ValueError(f"filter operator {op!r} on {field!r} is not supported "
                                     f"(use {', '.join(sorted(OPERATORS))})")


def _lookup(value: Mapping[str, Any], field: str) -> Any:
    if field in value:
        return value[field]
    node: Any = value
    for step in field.split("."):
        if not isinstance(node, Mapping) or step not in node:
            return _MISSING
        node = node[step]
    return node


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def _apply(have: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return have is not _MISSING and _equal(have, operand)
    if op == "$ne":
        return have is _MISSING or not _equal(have, operand)
    a, b = _number(have), _number(operand)
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _equal(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_equal(have.get(k, _MISSING), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (isinstance(have, list | tuple) and len(have) == len(want)
                and all(_equal(h, w) for h, w in zip(have, want, strict=True)))
    return have is not _MISSING and bool(have == want)


def matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` passes ``flt`` (checked by :func:`check_filter` beforehand)."""
    for field, condition in (flt or {}).items():
        have = _lookup(value, field)
        if _is_operators(condition):
            if not all(_apply(have, op, operand) for op, operand in condition.items()):
                return False
        elif not _equal(have, condition):
            return False
    return True
