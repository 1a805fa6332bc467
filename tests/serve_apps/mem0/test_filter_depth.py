"""Mem0 filters are walked recursively (``AND`` / ``OR``): nesting is bounded by the one limit of
:mod:`memcore.jsontext`, a 422 naming ``filters`` (never a RecursionError, which would be a 503)."""

from __future__ import annotations

from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.jsontext import MAX_JSON_DEPTH
from serve_apps.mem0.filters import parse


def _nested(levels: int) -> dict[str, Any]:
    flt: dict[str, Any] = {"user_id": "alice"}
    for _ in range(levels):
        flt = {"AND": [flt]}
    return flt


def test_nesting_within_the_limit_is_parsed() -> None:
    node = parse(_nested(MAX_JSON_DEPTH // 2 - 1))
    while node.op == "and" and node.children:  # the nested ANDs, down to the one condition
        node = node.children[0]
    assert (node.field, node.value) == ("user_id", "alice")


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 5_000])
def test_deeper_nesting_is_a_validation_error_naming_filters(levels: int) -> None:
    with pytest.raises(ValidationError, match=f"nested deeper than {MAX_JSON_DEPTH} levels") as err:
        parse(_nested(levels))
    assert err.value.field == "filters"
