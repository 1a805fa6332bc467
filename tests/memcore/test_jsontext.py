"""Bounded parsing of client JSON text: each bad input is a JSONTextError saying what is wrong."""

from __future__ import annotations

import pytest

from memcore.jsontext import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, JSONTextError, check_depth, depth_of, loads


def test_ordinary_json_parses() -> None:
    assert loads('{"a": [1, 2.5, -3e2, true, null, "x"]}') == {"a": [1, 2.5, -300.0, True, None, "x"]}
    assert loads(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is not None
    assert loads(str(2**63)) == 2**63  # range checks belong to the field (metadata: 64-bit)


@pytest.mark.parametrize(("text", "message"), [
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), f"nested deeper than {MAX_JSON_DEPTH}"),
    ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_JSON_DEPTH}"),
    ("9" * 10_000, f"a number longer than {MAX_NUMBER_CHARS} characters (10000)"),
    ("0." + "1" * 100, "a number longer than"),
    ("1e999", "out of range"),
    ("NaN", "NaN is not a JSON value"),
    ("-Infinity", "-Infinity is not a JSON value"),
    ('{"a": ', "malformed JSON"),
])
def test_bad_text_is_a_json_text_error(text: str, message: str) -> None:
    with pytest.raises(JSONTextError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loads(text)


def test_depth_is_counted_without_recursion() -> None:
    assert depth_of(1) == 0 and depth_of({}) == 1 and depth_of({"a": [{"b": []}]}) == 4
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert depth_of(deep) == MAX_JSON_DEPTH + 1  # stops once over the limit
    with pytest.raises(JSONTextError):
        check_depth(deep)
