"""How :class:`~memclient.integrations.langgraph.MemclusterStore` keeps a LangGraph item's value in a memcluster
entry, and what search ranks: the entry's text and metadata of a value (:func:`encode_value`) and the value of
an entry (:func:`value_of`).

- The text search ranks (:func:`text_of`): the value's string leaves (``field: text``), or only the
  top-level fields named by ``index`` / ``index_fields`` (none: ``index=False``; the item key then).
- A value whose JSON is at most :data:`INLINE_VALUE_BYTES` and nests at most :data:`INLINE_DEPTH` deep is
  kept whole in the entry's metadata (``value``), within memcluster's metadata limits
  (``memcore.metadata``: strings of 1024 characters, 4 levels under the metadata object).
- Any other value (long strings, deep nesting, NaN) is kept as JSON in the entry's text, the whole text being
  that JSON (LangGraph's default embeds the value's JSON, ``fields=["$"]``) or, with index fields, their text,
  a newline and the JSON; ``lg_vt`` in the metadata is the JSON's length (the text's last characters). The
  text is bounded by memcluster's memory text limit, :data:`MAX_TEXT_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memclient import Entry

__all__ = ["INLINE_DEPTH", "INLINE_VALUE_BYTES", "MAX_TEXT_BYTES", "VALUE", "VALUE_JSON", "encode_value",
           "text_of", "value_of"]

#: metadata: the item's value, when it is small (:data:`INLINE_VALUE_BYTES`)
VALUE = "value"
#: metadata: the item's value is the last this-many characters of the entry's text (its JSON)
VALUE_JSON = "lg_vt"
#: a value kept in the entry's metadata: its JSON is at most this many bytes (memcluster's metadata strings
#: hold 1024 characters) and it nests at most :data:`INLINE_DEPTH` deep (memcluster's metadata nests 4 levels,
#: the ``value`` key is one); any other value is kept in the entry's text, up to :data:`MAX_TEXT_BYTES`
INLINE_VALUE_BYTES = 1024
INLINE_DEPTH = 3
#: memcluster's memory text limit in UTF-8 bytes (the server's ``memcore.fields.MAX_TEXT_BYTES``; the client
#: distribution cannot import it; tests/integrations/test_langgraph_batch.py keeps the two equal)
MAX_TEXT_BYTES = 8192


def _leaves(value: Any, head: str = "") -> list[str]:
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _leaves(v, f"{head}{k}: " if not head else f"{head}{k} ")]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _leaves(v, head)]
    if isinstance(value, str):
        return [f"{head}{value}"] if value.strip() else []
    if value is None:
        return []
    return [f"{head}{json.dumps(value)}"]


def text_of(value: Mapping[str, Any], fields: Sequence[str] | None, key: str) -> str:
    """What search ranks: the named top-level fields (all string leaves when ``fields`` is None)."""
    if fields is not None:
        parts = [s for f in fields if f in value for s in _leaves(value[f])]
    else:
        parts = _leaves(value)
    return "\n".join(parts).strip() or key


def _depth(value: Any) -> int:
    if isinstance(value, Mapping):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _inline(value: Mapping[str, Any]) -> bool:
    """Whether ``value`` is kept in the entry's metadata (:data:`INLINE_VALUE_BYTES`, :data:`INLINE_DEPTH`)."""
    try:
        blob = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity: not a metadata value
        return False
    return len(blob.encode("utf-8")) <= INLINE_VALUE_BYTES and _depth(value) <= INLINE_DEPTH


def encode_value(value: Mapping[str, Any], fields: Sequence[str] | None, key: str) -> tuple[str, dict[str, Any]]:
    """The entry text and the metadata that keep ``value``: a small value whole in the metadata (``value``) beside
    the text search ranks (:func:`text_of`); a larger one as JSON in the text (its length in ``lg_vt``), the
    whole text then being that JSON (LangGraph's default, ``fields=["$"]``, embeds the value's JSON) or, with
    index fields, their text and then the JSON. ``TypeError`` for a value JSON cannot hold, ``ValueError`` for
    one longer than :data:`MAX_TEXT_BYTES`: both before anything is written."""
    try:
        blob = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the value of item {key!r} is not JSON: {exc}") from exc
    indexed = text_of(value, fields, key)
    if _inline(value):
        return indexed, {VALUE: dict(value)}
    text = blob if fields is None else f"{indexed}\n{blob}"
    size = len(text.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"the value of item {key!r} is {size} bytes of JSON (with its indexed text); memcluster "
                         f"keeps at most {MAX_TEXT_BYTES} bytes of text per item")
    return text, {VALUE_JSON: len(blob)}


def value_of(entry: Entry) -> dict[str, Any]:
    """The item value an entry keeps (:func:`encode_value`; an older entry's ``value`` metadata)."""
    n = entry.metadata.get(VALUE_JSON)
    if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= len(entry.text):
        loaded = json.loads(entry.text[-n:])
        return dict(loaded) if isinstance(loaded, Mapping) else {}
    return dict(entry.metadata.get(VALUE) or {})
