"""Entry metadata: validation (422-style field names), storage in both Qdrant engines, the id rule,
equality filters in search and read, and the export/import round trip."""

from __future__ import annotations

import pytest

from memcore import backup
from memcore.errors import ValidationError
from memcore.ids import memory_id
from memcore.metadata import MAX_JSON_BYTES, MAX_KEYS, check_filter, matches
from memcore.model import Memory, UserKey
from memcore.service import MemoryService, validate

KEY = UserKey(app="a", user="u")


def test_metadata_is_stored_returned_and_not_part_of_the_id(service: MemoryService) -> None:
    e1 = service.add(KEY, {"text": "Prefers green tea", "metadata": {"agent": "a1", "n": 3, "tags": ["x", {"y": 1}]}})
    assert e1.metadata == {"agent": "a1", "n": 3, "tags": ["x", {"y": 1}]}
    assert service.get(KEY, e1.id).metadata == e1.metadata
    assert e1.id == memory_id(KEY, Memory(text="Prefers green tea"))
    e2 = service.add(KEY, {"text": "Prefers green tea", "metadata": {"agent": "a2"}})
    assert e2.id == e1.id and service.get(KEY, e1.id).metadata == {"agent": "a2"}


def test_a_write_without_metadata_keeps_it(service: MemoryService) -> None:
    e = service.add(KEY, {"text": "Owns a red bike", "metadata": {"agent": "a1"}})
    assert service.add(KEY, Memory(text="Owns a red bike", topics=["bike"])).metadata == {"agent": "a1"}
    moved = service.update(KEY, e.id, Memory(text="Owns a blue bike"))  # an extractor's or a tool's update
    assert moved.id != e.id and moved.metadata == {"agent": "a1"}
    cleared = service.update(KEY, moved.id, {"text": "Owns a blue bike", "metadata": {}})
    assert cleared.metadata == {}


def test_filters_in_search_and_read(service: MemoryService) -> None:
    service.add(KEY, {"text": "Alice likes hiking in the alps", "metadata": {"agent": "a1", "run": "r1", "n": 1}})
    service.add(KEY, {"text": "Alice likes hiking near the sea", "metadata": {"agent": "a2", "run": "r1", "n": 2}})
    service.add(KEY, {"text": "Alice likes hiking with her dog", "metadata": {"agent": "a1", "flag": True}})
    texts = lambda hits: sorted(h.entry.text for h in hits)  # noqa: E731
    for hybrid in (True, False):
        opts = {"query": "Alice hiking", "hybrid": hybrid, "similarity_threshold": -1.0}
        assert len(service.search(KEY, opts)) == 3
        got = service.search(KEY, {**opts, "metadata_filter": {"agent": "a1"}})
        assert texts(got) == ["Alice likes hiking in the alps", "Alice likes hiking with her dog"]
        got = service.search(KEY, {**opts, "metadata_filter": {"agent": "a1", "run": "r1"}})
        assert texts(got) == ["Alice likes hiking in the alps"]
        assert texts(service.search(KEY, {**opts, "metadata_filter": {"n": 2}})) == ["Alice likes hiking near the sea"]
        assert texts(service.search(KEY, {**opts, "metadata_filter": {"flag": True}})) == [
            "Alice likes hiking with her dog"]
        assert service.search(KEY, {**opts, "metadata_filter": {"flag": 1}}) == []  # a bool never equals a number
    assert [e.text for e in service.read(KEY, metadata_filter={"run": "r1"})] == [
        "Alice likes hiking near the sea", "Alice likes hiking in the alps"]
    assert service.read(KEY, 1, metadata_filter={"agent": "a1"})[0].text == "Alice likes hiking with her dog"
    other = UserKey(app="a", user="v")
    assert service.read(other, metadata_filter={"agent": "a1"}) == []


def test_export_import_round_trip(make_service) -> None:  # type: ignore[no-untyped-def]
    src = make_service("edge", name="src")
    src.add(KEY, {"text": "Lives in Lisbon", "metadata": {"agent": "a1", "nested": {"k": [1, 2.5, None]}}})
    jsonl = "".join(backup.encode_line(e) for e in src.export("a"))
    dst = make_service("server", name="dst")
    dst.restore(backup.parse_jsonl(jsonl, app="a"))
    (entry,) = dst.read(KEY)
    assert entry.metadata == {"agent": "a1", "nested": {"k": [1, 2.5, None]}}
    assert [e.text for e in dst.read(KEY, metadata_filter={"agent": "a1"})] == ["Lives in Lisbon"]


@pytest.mark.parametrize(("metadata", "field"), [
    ({"bad.key": 1}, "metadata.bad.key"),
    ({"": 1}, "metadata"),
    ({"k": float("nan")}, "metadata.k"),
    ({"k": "x" * 2000}, "metadata.k"),
    ({"k": {"a": {"b": {"c": {"d": 1}}}}}, "metadata.k.a.b.c"),
    ({"k": object()}, "metadata.k"),
    ({f"k{i}": i for i in range(MAX_KEYS + 1)}, "metadata"),
    ({f"k{i}": "x" * 1000 for i in range(5)}, "metadata"),
    (["not", "an", "object"], "metadata"),
])
def test_bad_metadata_names_the_field(metadata: object, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate(Memory, {"text": "t", "metadata": metadata})
    assert err.value.field == field
    assert MAX_JSON_BYTES == 4096


def test_bad_filters_name_the_field(service: MemoryService) -> None:
    with pytest.raises(ValidationError) as err:
        service.search(KEY, {"query": "x", "metadata_filter": {"k": 1.5}})
    assert err.value.field == "metadata_filter.k"
    with pytest.raises(ValidationError) as err:
        service.read(KEY, metadata_filter={"k": ["list"]})
    assert err.value.field == "metadata_filter.k"
    with pytest.raises(ValidationError) as err:
        service.read(KEY, metadata_filter={"a.b": "x"})
    assert err.value.field == "metadata_filter.a.b"


def test_matches_is_strict() -> None:
    assert matches({"a": 1}, check_filter({"a": 1}))
    assert not matches({"a": True}, {"a": 1})
    assert not matches({"a": 1.0}, {"a": 1})
    assert not matches({}, {"a": "x"})
    assert matches({"a": "x"}, None)


def test_the_size_limit_counts_utf8_bytes_of_compact_json() -> None:
    import json

    from memcore.metadata import MetadataError, check_metadata

    def size(m: dict[str, str]) -> int:
        return len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    assert check_metadata(None) == {} and check_metadata({}) == {}
    fits = {"k0": "é" * 1000, "k1": "é" * 1000, "k2": "é" * 30}  # "é" is 2 bytes in UTF-8, not escaped
    over = {**fits, "k2": "é" * 40}
    assert size(fits) <= MAX_JSON_BYTES < size(over)
    assert check_metadata(fits) == fits
    with pytest.raises(MetadataError) as err:
        check_metadata(over)
    assert err.value.field == "metadata"
