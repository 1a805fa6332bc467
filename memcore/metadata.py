"""Caller metadata on a memory: a small JSON object, and the equality filter over it.

An entry's ``metadata`` is what an integration needs to keep beside the text (Mem0's
``agent_id``/``run_id`` and free ``metadata``, a LangGraph namespace, a client's own tags). It is
stored in the vector-store payload, exported and imported with the entry, returned by the API,
and NOT part of the content-addressed id (like topics): re-adding the same text with other
metadata is the same memory, its metadata replaced. A write whose :class:`memcore.model.Memory`
does not name ``metadata`` (an extractor's operation, a tool call) keeps the entry's metadata, also
across an id rotation; the HTTP API's add and update always name it (an omitted one is ``{}``).

Limits (declared here once; a bad value raises ``ValueError`` naming ``metadata.<key>``):

- at most :data:`MAX_KEYS` keys; a key is 1..:data:`MAX_KEY_CHARS` characters of ASCII letters,
  digits, ``_`` and ``-`` (no dots: a key is one step of a payload path);
- a value is a string (at most :data:`MAX_STRING_CHARS` characters), an integer (64-bit), a
  finite float, a boolean, null, or a list / object of those nested at most :data:`MAX_DEPTH` deep;
- the whole object serialises to at most :data:`MAX_JSON_BYTES` bytes of JSON.

A filter (:func:`check_filter`) is an AND of equalities on top-level keys whose values are
scalars (string, integer, boolean); :func:`matches` is the authoritative predicate, applied after
any store-side push-down (:func:`pushdown`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

MAX_KEYS = 32
MAX_KEY_CHARS = 64
MAX_STRING_CHARS = 1024
MAX_DEPTH = 4
MAX_JSON_BYTES = 4096
MAX_FILTER_KEYS = 16
INT_LIMIT = 2**63
#: The payload field that holds the metadata object (filters address ``metadata.<key>``).
PAYLOAD_FIELD = "metadata"

_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")

Scalar = str | int | bool


class MetadataError(ValueError):
    """A bad metadata object or filter; ``field`` is ``metadata.<key>`` (or ``metadata``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_key(key: Any, where: str = PAYLOAD_FIELD) -> str:
    if not isinstance(key, str) or not key:
        raise MetadataError("metadata keys must be non-empty strings", where)
    if len(key) > MAX_KEY_CHARS:
        raise MetadataError(f"metadata key longer than {MAX_KEY_CHARS} characters", f"{where}.{key[:MAX_KEY_CHARS]}")
    if not _KEY.match(key):
        raise MetadataError("metadata keys are ASCII letters, digits, '_' and '-'", f"{where}.{key}")
    return key


def _check_value(value: Any, field: str, depth: int) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -INT_LIMIT <= value < INT_LIMIT:
            raise MetadataError("integer out of the 64-bit range", field)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MetadataError("floats must be finite", field)
        return
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            raise MetadataError(f"string longer than {MAX_STRING_CHARS} characters", field)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise MetadataError("string contains a lone surrogate", field) from None
        return
    if depth >= MAX_DEPTH:
        raise MetadataError(f"nested deeper than {MAX_DEPTH} levels", field)
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_value(item, f"{field}.{i}", depth + 1)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise MetadataError("object keys must be strings", field)
            _check_value(item, f"{field}.{k}", depth + 1)
        return
    raise MetadataError(f"unsupported value type {type(value).__name__}", field)


#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` without building an encoder per call.
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def check_metadata(value: Any) -> dict[str, Any]:
    """``value`` as a validated metadata object (``None`` is the empty object)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MetadataError("metadata must be a JSON object", PAYLOAD_FIELD)
    if len(value) > MAX_KEYS:
        raise MetadataError(f"more than {MAX_KEYS} metadata keys", PAYLOAD_FIELD)
    if not value:  # every entry without metadata is checked on every read: skip the JSON of "{}"
        return {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        check_key(key)
        _check_value(item, f"{PAYLOAD_FIELD}.{key}", 1)
        out[key] = item
    size = len(_COMPACT_JSON.encode(out).encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise MetadataError(f"metadata is larger than {MAX_JSON_BYTES} bytes of JSON", PAYLOAD_FIELD)
    return out


def check_filter(value: Any, where: str = "metadata_filter") -> dict[str, Scalar] | None:
    """A validated equality filter (None or empty: no filter)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise MetadataError("metadata_filter must be a JSON object of key: value", where)
    if len(value) > MAX_FILTER_KEYS:
        raise MetadataError(f"more than {MAX_FILTER_KEYS} filter keys", where)
    out: dict[str, Scalar] = {}
    for key, item in value.items():
        check_key(key, where)
        if not isinstance(item, str | int | bool) or isinstance(item, float):
            raise MetadataError("filter values are strings, integers or booleans", f"{where}.{key}")
        _check_value(item, f"{where}.{key}", 1)
        out[key] = item
    return out or None


def _same(a: Any, b: Scalar) -> bool:
    if isinstance(b, bool) or isinstance(a, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return type(a) is type(b) and a == b


def matches(metadata: Mapping[str, Any], flt: Mapping[str, Scalar] | None) -> bool:
    """True when every ``key: value`` of ``flt`` equals the metadata's (booleans never equal numbers)."""
    if not flt:
        return True
    return all(k in metadata and _same(metadata[k], v) for k, v in flt.items())


def pushdown(flt: Mapping[str, Scalar] | None) -> tuple[tuple[str, str], ...]:
    """The string equalities a vector store can evaluate itself (payload path ``metadata.<key>``);
    the rest is left to :func:`matches`."""
    if not flt:
        return ()
    return tuple((f"{PAYLOAD_FIELD}.{k}", v) for k, v in flt.items() if isinstance(v, str))


def refine_loc(loc: tuple[Any, ...], error: Any) -> tuple[Any, ...]:
    """A pydantic error location with its last step replaced by a :class:`MetadataError`'s field
    (``("body", "metadata")`` -> ``("body", "metadata.color")``); other errors keep theirs."""
    if isinstance(error, MetadataError) and loc:
        return (*loc[:-1], error.field)
    return loc
