"""Mem0's v2 ``filters`` (search and get_all) over memcluster entries: parsed once into a tree, evaluated
per entry (:func:`matches`), with the users the filter can reach (:func:`users_of`) and the equalities the
shard can apply itself (:func:`pushdown`).

The grammar (Mem0's "Memory Filters" page) and how each part maps:

- a JSON object of conditions (several keys: AND); ``AND`` / ``OR`` take a non-empty list of filters;
  ``NOT`` takes one filter or a list (a list: none of them matches);
- entity fields ``user_id``, ``agent_id``, ``run_id``, ``app_id``: a value (``eq``), ``{"eq"|"ne": v}``,
  ``{"in": [...]}``, ``"*"`` (any non-null value). ``ne`` also matches a memory without the field, as in
  Mem0. Every memcluster memory has a user: ``user_id: "*"``, or a filter that names no user (nor
  ``memory_ids``; an agent's or a run's memories, as in Mem0), reaches every user of the app;
- time fields ``created_at``, ``updated_at`` and ``timestamp`` (the memory's ``created_at``, which Mem0's
  ``timestamp`` on add sets): ``gt`` / ``gte`` / ``lt`` / ``lte`` / ``eq`` / ``ne`` with an ISO-8601
  date or date-time (naive: UTC) or Unix seconds; a bare date stands for the whole UTC day (``lte`` and
  ``gt`` of ``2024-07-31`` bound at the day's end, ``eq`` is that day);
- ``categories`` (the memory's ``categories``, memcluster's topics): a value or ``eq`` (has it), ``ne``
  (has not), ``in`` (has one of them), ``contains`` (one category contains the text); ``category: "x"``
  (Mem0 open source's style, where other keys are metadata) matches the category or metadata ``category``;
- ``metadata``: ``{"key": value}`` (equality of top-level keys; several keys: all), or
  ``{"key": {"eq"|"ne"|"contains": value}}``; other operators are refused, as Mem0 refuses them;
- ``keywords``: ``contains`` / ``icontains`` on the memory text;
- ``memory_ids``: a list of Mem0 memory ids (or ``{"in": [...]}``); each id names its user.

Anything else (a field, an operator, a value of the wrong type) is 422 naming its path in the filter
(``filters.AND.1.created_at.gte``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from memcore.errors import NotFoundError, ValidationError
from memcore.jsontext import JSONTextError, check_depth
from memcore.metadata import MAX_FILTER_KEYS, MetadataError, Scalar, check_key
from memcore.model import Entry
from serve_apps.mem0 import map as M

WILDCARD = "*"
MAX_NODES = 256
"""At most this many conditions in one filter."""
MAX_USERS = 1000
"""At most this many users one filter reaches (``user_id: "*"`` on a larger app is refused)."""
ENTITY_FIELDS = ("user_id", "agent_id", "run_id", "app_id")
TIME_FIELDS = {"created_at": "created_at", "updated_at": "updated_at", "timestamp": "created_at"}
FIELDS = (*ENTITY_FIELDS, *TIME_FIELDS, "categories", "category", "metadata", "keywords", "memory_ids")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class AllUsers:
    """The users of ``user_id: "*"``: every user of the app."""


ALL = AllUsers()
Users = set[str] | AllUsers | None
"""The users a filter reaches: a set, every user (:data:`ALL`), or no bound (None)."""


@dataclass(frozen=True)
class Node:
    """One node of a parsed filter: ``op`` is ``and`` / ``or`` / ``not`` (``children``) or a condition's
    operator on ``field`` with ``value`` (an entity value, a set, an instant, a text ...)."""

    op: str
    field: str = ""
    value: Any = None
    children: tuple[Node, ...] = ()
    path: str = ""


# ----------------------------------------------------------------- parse
def parse(filters: Any, field: str = "filters") -> Node:
    """The tree of ``filters`` (None or ``{}``: match everything); 422 naming the bad part. Nested at most
    :data:`memcore.jsontext.MAX_JSON_DEPTH` levels (the walk is recursive)."""
    try:
        check_depth(filters)
    except JSONTextError as exc:
        raise ValidationError(str(exc), field=field) from None
    count = [0]
    return _parse(filters if filters is not None else {}, field, count)


def _bump(count: list[int], field: str) -> None:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise ValidationError(f"the filter has more than {MAX_NODES} conditions", field=field)


def _parse(value: Any, field: str, count: list[int]) -> Node:
    if not isinstance(value, Mapping):
        raise ValidationError("a filter is a JSON object of conditions", field=field)
    parts: list[Node] = []
    for key, item in value.items():
        path = f"{field}.{key}" if field else str(key)
        _bump(count, path)
        if key in ("AND", "OR"):
            if isinstance(item, Mapping):
                item = [item]
            if not isinstance(item, list) or not item:
                raise ValidationError(f"{key} takes a non-empty list of filters", field=path)
            kids = tuple(_parse(v, f"{path}.{i}", count) for i, v in enumerate(item))
            parts.append(Node(key.lower(), children=kids, path=path))
        elif key == "NOT":
            items = item if isinstance(item, list) else [item]
            if not items:
                raise ValidationError("NOT takes a filter or a non-empty list of filters", field=path)
            kids = tuple(_parse(v, f"{path}.{i}" if isinstance(item, list) else path, count)
                         for i, v in enumerate(items))
            parts.append(Node("not", children=(Node("or", children=kids, path=path),), path=path))
        elif key in ENTITY_FIELDS:
            parts.append(_entity(key, item, path))
        elif key in TIME_FIELDS:
            parts.append(_time(key, item, path))
        elif key == "categories":
            parts.append(_categories(item, path))
        elif key == "category":
            parts.append(_category(item, path))
        elif key == "metadata":
            parts.append(_metadata(item, path))
        elif key == "keywords":
            parts.append(_keywords(item, path))
        elif key == "memory_ids":
            parts.append(_memory_ids(item, path))
        else:
            raise ValidationError(f"unsupported filter field {key!r}: use one of {', '.join(FIELDS)}, AND, OR, NOT",
                                  field=path)
    return parts[0] if len(parts) == 1 else Node("and", children=tuple(parts), path=field)  # none: match all


def _ops(item: Any, path: str, allowed: Sequence[str]) -> list[tuple[str, Any, str]]:
    """``(operator, value, path)`` of a condition: a bare value is ``eq``; an object names operators."""
    if not isinstance(item, Mapping):
        return [("eq", item, path)]
    if not item:
        raise ValidationError(f"name an operator: {', '.join(allowed)}", field=path)
    out = []
    for op, v in item.items():
        if op not in allowed:
            raise ValidationError(f"unsupported operator {op!r} here: use {', '.join(allowed)}", field=f"{path}.{op}")
        out.append((str(op), v, f"{path}.{op}"))
    return out


def _all(nodes: list[Node], path: str) -> Node:
    return nodes[0] if len(nodes) == 1 else Node("and", children=tuple(nodes), path=path)


def _entity(name: str, item: Any, path: str) -> Node:
    nodes = []
    for op, v, where in _ops(item, path, ("eq", "ne", "in")):
        if op == "in":
            if not isinstance(v, list) or not v:
                raise ValidationError("in takes a non-empty list of ids", field=where)
            nodes.append(Node("in", name, frozenset(M.entity_value(x, where) for x in v), path=where))
        elif v == WILDCARD and op == "eq":
            nodes.append(Node("any", name, path=where))
        else:
            nodes.append(Node(op, name, M.entity_value(v, where), path=where))
    return _all(nodes, path)


def instant(value: Any, field: str, *, end: bool = False) -> datetime:
    """A filter's time value: ISO-8601 date-time (naive: UTC), Unix seconds, or a bare date (its start, or
    with ``end`` the start of the next day)."""
    if isinstance(value, bool) or value is None:
        raise ValidationError("a time is an ISO-8601 date or date-time, or Unix seconds", field=field)
    try:
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError(value)
            return datetime.fromtimestamp(value, tz=UTC)
        if not isinstance(value, str):
            raise ValueError(value)
        if _DAY.fullmatch(value):
            day = date.fromisoformat(value) + (timedelta(days=1) if end else timedelta())
            return datetime.combine(day, time(0), tzinfo=UTC)
        at = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        raise ValidationError(f"{value!r} is not an ISO-8601 date or date-time, or Unix seconds",
                              field=field) from None


def _time(name: str, item: Any, path: str) -> Node:
    attr = TIME_FIELDS[name]
    ops = _ops(item, path, ("gt", "gte", "lt", "lte", "eq", "ne"))
    return _all([bound(attr, op, v, where) for op, v, where in ops], path)


def bound(attr: str, op: str, v: Any, where: str) -> Node:
    """The condition ``<attr> <op> v`` on ``created_at`` / ``updated_at`` (a bare date: the whole UTC day)."""
    day = isinstance(v, str) and bool(_DAY.fullmatch(v))
    start = instant(v, where)
    if day and op in ("eq", "ne"):  # the whole day
        return Node("range" if op == "eq" else "outside", attr, (start, start + timedelta(days=1)), path=where)
    if day and op in ("lte", "gt"):  # through / after the end of the day
        return Node({"lte": "lt", "gt": "gte"}[op], attr, start + timedelta(days=1), path=where)
    return Node(f"t{op}", attr, start, path=where)


def created_between(since: Any, until: Any) -> Node | None:
    """``start_date`` / ``end_date`` of get_all: created at or after ``since``, at or before ``until``."""
    given = (("gte", since, "start_date"), ("lte", until, "end_date"))
    nodes = [bound("created_at", op, v, name) for op, v, name in given if v is not None]
    return _all(nodes, "start_date") if nodes else None


def categories_in(values: list[str] | None, field: str = "categories") -> Node | None:
    """The top-level ``categories`` parameter: memories with one of them."""
    if values is None:
        return None
    if not values:
        raise ValidationError("categories takes a non-empty list", field=field)
    return Node("cat_in", "categories", frozenset(_text(v, f"{field}.{i}") for i, v in enumerate(values)), path=field)


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise ValidationError("a non-empty string is required", field=where)
    return v


def _categories(item: Any, path: str) -> Node:
    nodes = []
    for op, v, where in _ops(item, path, ("eq", "ne", "in", "contains")):
        if op == "in":
            if not isinstance(v, list) or not v:
                raise ValidationError("in takes a non-empty list of categories", field=where)
            nodes.append(Node("cat_in", "categories", frozenset(_text(x, where) for x in v), path=where))
        else:
            nodes.append(Node(f"cat_{op}", "categories", _text(v, where), path=where))
    return _all(nodes, path)


def _category(item: Any, path: str) -> Node:
    """``category: "x"`` (Mem0's open-source filters, where other keys are metadata): the memory has the
    category, or its metadata ``category`` is it."""
    if isinstance(item, Mapping):
        raise ValidationError("category takes one value; use categories for operators", field=path)
    value = _text(item, path)
    return Node("or", children=(Node("cat_eq", "categories", value, path=path),
                                Node("meta_eq", "category", value, path=path)), path=path)


def _metadata(item: Any, path: str) -> Node:
    if not isinstance(item, Mapping) or not item:
        raise ValidationError("metadata takes a non-empty object of key: value", field=path)
    nodes = []
    for key, cond in item.items():
        where = f"{path}.{key}"
        try:
            check_key(key, path)
        except MetadataError as exc:
            raise ValidationError(str(exc), field=exc.field) from None
        if key.startswith(M.PREFIX):
            raise ValidationError(f"metadata keys starting with {M.PREFIX!r} are reserved", field=where)
        for op, v, at in _ops(cond, where, ("eq", "ne", "contains")):
            if op == "contains":
                nodes.append(Node("meta_contains", key, _scalar(v, at), path=at))
            else:
                nodes.append(Node(f"meta_{op}", key, _scalar(v, at), path=at))
    return _all(nodes, path)


def _scalar(v: Any, where: str) -> Scalar:
    if not isinstance(v, str | int | bool) or isinstance(v, float):
        raise ValidationError("metadata filter values are strings, integers or booleans", field=where)
    return v


def _keywords(item: Any, path: str) -> Node:
    if not isinstance(item, Mapping):
        raise ValidationError("keywords takes {\"contains\": text} or {\"icontains\": text}", field=path)
    return _all([Node(op, "keywords", _text(v, where), path=where)
                 for op, v, where in _ops(item, path, ("contains", "icontains"))], path)


def _memory_ids(item: Any, path: str) -> Node:
    values = item.get("in") if isinstance(item, Mapping) and set(item) == {"in"} else item
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ValidationError("memory_ids takes a non-empty list of memory ids", field=path)
    ids: set[tuple[str, str]] = set()
    for v in values:
        try:
            ids.add(M.split_id(v))
        except NotFoundError:
            raise ValidationError(f"{v!r} is not a memory id of this API", field=path) from None
    return Node("ids", "memory_ids", frozenset(ids), path=path)


def conjoin(*nodes: Node | None) -> Node:
    """The AND of the given trees (None left out; an AND among them is flattened)."""
    kids = tuple(k for n in nodes if n is not None for k in (n.children if n.op == "and" else (n,)))
    return kids[0] if len(kids) == 1 else Node("and", children=kids, path="filters")


# ----------------------------------------------------------------- users
def users_of(node: Node) -> Users:
    """The users ``node`` can match (see :data:`Users`)."""
    if node.op == "and":
        bounded = [u for u in map(users_of, node.children) if u is not None]
        sets = [u for u in bounded if isinstance(u, set)]
        if sets:
            out = set(sets[0])
            for s in sets[1:]:
                out &= s
            return out
        return ALL if bounded else None
    if node.op == "or":
        kids = [users_of(c) for c in node.children]
        if any(u is None for u in kids):
            return None
        if any(isinstance(u, AllUsers) for u in kids):
            return ALL
        return {x for u in kids if isinstance(u, set) for x in u}
    if node.field == "user_id":
        if node.op == "eq":
            return {node.value}
        if node.op == "in":
            return set(node.value)
        if node.op == "any":
            return ALL
    if node.op == "ids":
        return {user for user, _ in node.value}
    return None


def pushdown(node: Node) -> dict[str, Scalar]:
    """Equalities every match of ``node`` satisfies that the shard applies itself (its metadata filter):
    entity ids and metadata equalities at the top-level AND."""
    out: dict[str, Scalar] = {}
    for kid in node.children if node.op == "and" else (node,):
        if kid.op == "eq" and kid.field in M.ENTITY_KEYS:
            key = M.ENTITY_KEYS[kid.field]
        elif kid.op == "meta_eq":
            key = kid.field
        else:
            continue
        if key in out and out[key] != kid.value:
            return {**out, key: kid.value}  # contradictory: nothing matches either way; the predicate decides
        if key not in out and len(out) == MAX_FILTER_KEYS:
            break  # the shard's limit; the predicate applies the rest
        out[key] = kid.value
    return out


# ----------------------------------------------------------------- evaluate
def _entity_of(entry: Entry, name: str) -> str | None:
    if name == "user_id":
        return M.mem0_user(entry.user)
    value = entry.metadata.get(M.ENTITY_KEYS[name])
    return value if isinstance(value, str) else None


def _contains(have: Any, want: Scalar) -> bool:
    if isinstance(have, str) and isinstance(want, str):
        return want in have
    if isinstance(have, list):
        return want in have
    return False


_TIME: dict[str, Callable[[datetime, Any], bool]] = {
    "tgt": lambda t, v: t > v, "tgte": lambda t, v: t >= v, "tlt": lambda t, v: t < v, "tlte": lambda t, v: t <= v,
    "teq": lambda t, v: t == v, "tne": lambda t, v: t != v, "gte": lambda t, v: t >= v, "lt": lambda t, v: t < v,
    "range": lambda t, v: v[0] <= t < v[1], "outside": lambda t, v: not v[0] <= t < v[1],
}


def matches(node: Node, entry: Entry) -> bool:
    """Whether ``entry`` satisfies the filter ``node``."""
    op, field, value = node.op, node.field, node.value
    if op == "and":
        return all(matches(c, entry) for c in node.children)
    if op == "or":
        return any(matches(c, entry) for c in node.children)
    if op == "not":
        return not matches(node.children[0], entry)
    if field in ENTITY_FIELDS:
        have = _entity_of(entry, field)
        if op == "any":
            return have is not None
        if op == "in":
            return have in value
        return (have == value) == (op == "eq")
    if field in ("created_at", "updated_at"):
        return _TIME[op](getattr(entry, field), value)
    if field == "categories":
        cats = entry.topics
        if op == "cat_eq":
            return value in cats
        if op == "cat_ne":
            return value not in cats
        if op == "cat_in":
            return any(c in value for c in cats)
        return any(value in c for c in cats)
    if field == "keywords":
        return value in entry.text if op == "contains" else value.casefold() in entry.text.casefold()
    if op == "ids":
        return (M.mem0_user(entry.user), entry.id) in value
    have = entry.metadata.get(field, _MISSING)
    if op == "meta_eq":
        return have is not _MISSING and have == value and type(have) is type(value)
    if op == "meta_ne":
        return not (have is not _MISSING and have == value and type(have) is type(value))
    return have is not _MISSING and _contains(have, value)


_MISSING: Any = object()
