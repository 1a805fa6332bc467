"""JSON text a client sends that the service parses itself (the ``metadata_filter`` query parameter, each
line of an import), parsed with bounds: one home for the limits, so that a client's bad input is a
:class:`JSONTextError` (the caller's 422 naming its field), never a ``RecursionError`` or a ``ValueError``
from deep inside the parser (which the HTTP layer would answer as a 503 "retry later").

- nesting (objects and arrays) at most :data:`MAX_JSON_DEPTH` levels deep (also the bound of the structured
  filters an API walks recursively, such as Mem0's ``AND`` / ``OR``: :func:`check_depth`);
- a number at most :data:`MAX_NUMBER_CHARS` characters long (a 64-bit integer or a float's repr fits in
  far fewer) and finite; ``NaN`` / ``Infinity`` are not JSON and are refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_JSON_DEPTH = 32
"""Nesting levels (objects and arrays) of client JSON the service walks: parsed text and structured filters."""
MAX_NUMBER_CHARS = 40
"""Characters of one JSON number (sign, digits, fraction and exponent)."""


class JSONTextError(ValueError):
    """Client JSON text that is malformed or out of bounds; the message says which (no field: the caller
    names it)."""


def _number(text: str) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONTextError(f"a number longer than {MAX_NUMBER_CHARS} characters ({len(text)})")


def _int(text: str) -> int:
    _number(text)
    return int(text)


def _float(text: str) -> float:
    _number(text)
    value = float(text)
    if not math.isfinite(value):
        raise JSONTextError(f"the number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise JSONTextError(f"{name} is not a JSON value")


def depth_of(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of ``value`` (a scalar: 0, ``{}`` / ``[]``: 1), counted without recursion and at most up
    to ``limit + 1`` (enough to tell it is over)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return deepest
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JSONTextError` when ``value`` nests deeper than ``limit`` levels."""
    if depth_of(value, limit) > limit:
        raise JSONTextError(f"nested deeper than {limit} levels")


def loads(text: str | bytes) -> Any:
    """``text`` as a JSON value, within the bounds above; :class:`JSONTextError` says what is wrong."""
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise JSONTextError(f"malformed JSON: {exc.msg} (at column {exc.colno})") from None
    except RecursionError:
        raise JSONTextError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except JSONTextError:
        raise
    except ValueError as exc:  # anything else the parser refuses (a lone surrogate in bytes, ...)
        raise JSONTextError(f"malformed JSON: {exc}") from None
    check_depth(value)
    return value
