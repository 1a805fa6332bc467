"""The backup format and MemoryService.export / restore (both vector-store adapters)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from memcore import backup
from memcore.errors import ValidationError
from memcore.model import UserKey
from memcore.service import MemoryService

A1, A2, B1 = UserKey(app="a", user="u1"), UserKey(app="a", user="u2"), UserKey(app="b", user="u1")


def _fill(svc: MemoryService) -> None:
    svc.add(A2, {"text": "u2 likes tea", "topics": ["drinks"], "provenance": ["t1"]})
    e = svc.add(A1, {"text": "u1 went to Porto", "kind": "episode", "event_time": "2024-05-01T12:00:00Z",
                     "participants": ["Ana"], "location": "Porto", "source": "assistant"})
    svc.update(A1, e.id, {"text": "u1 went to Faro", "kind": "episode", "event_time": "2024-05-01T12:00:00Z"})
    gone = svc.add(A1, {"text": "u1 deleted this"})
    svc.delete(A1, gone.id)
    svc.add(B1, {"text": "another app"})


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_export_restore_round_trip(make_service: Callable[..., MemoryService], backend: str) -> None:
    src = make_service(backend, name="src")
    _fill(src)
    exported = src.export("a")
    assert [(e.user, e.id) for e in exported] == sorted((e.user, e.id) for e in exported)
    assert {e.app for e in exported} == {"a"} and len(exported) == 4
    assert sum(not e.active for e in exported) == 2  # the rotated source and the deleted one
    assert src.users("a") == ["u1", "u2"] and src.users("nobody") == []
    assert src.export("a", user="u2") == [e for e in exported if e.user == "u2"]
    assert len(src.export()) == 5
    with pytest.raises(ValidationError):
        src.export(user="u1")
    text = "".join(backup.encode_line(e) for e in exported)

    dst = make_service(backend, name="dst")
    assert dst.restore(backup.parse_jsonl(text, "a"), batch_size=2) == 4
    assert "".join(backup.encode_line(e) for e in dst.export("a")) == text
    assert [e.id for e in dst.read(A1)] == [e.id for e in src.read(A1)]
    hits = dst.search(A1, {"query": "Faro"})
    assert [h.entry.id for h in hits] == [h.entry.id for h in src.search(A1, {"query": "Faro"})]
    assert dst.keywords.count() == 2  # active entries only
    assert dst.restore([e.model_dump() for e in exported]) == 4  # idempotent, dicts accepted
    assert dst.export("a") == exported


def test_restore_validates_everything_first(make_service: Callable[..., MemoryService]) -> None:
    src = make_service(name="src")
    _fill(src)
    good = [e.model_dump(mode="json") for e in src.export("a")]
    dst = make_service(name="dst")
    forged = {**good[0], "id": "0" * 64}
    with pytest.raises(ValidationError) as err:
        dst.restore([good[1], forged])
    assert err.value.field == "entries.1" and "does not match" in err.value.message
    with pytest.raises(ValidationError) as err:
        dst.restore([{**good[0], "extra": 1}])
    assert err.value.field == "entries.0.extra"
    assert dst.export() == []


def test_parse_jsonl_names_line_and_field() -> None:
    entry = {"id": "x", "app": "a", "user": "u", "text": "t", "created_at": "2024-01-01T00:00:00Z",
             "updated_at": "2024-01-01T00:00:00Z"}
    with pytest.raises(ValidationError) as err:
        backup.parse_jsonl(b"\n\n" + json.dumps({**entry, "app": "b"}).encode(), "a")
    assert err.value.field == "lines.3.app" and err.value.message.startswith("line 3, field app:")
    with pytest.raises(ValidationError) as err:
        backup.parse_jsonl(json.dumps({**entry, "created_at": "soon"}), "a")
    assert err.value.field == "lines.1.created_at"
    with pytest.raises(ValidationError) as err:
        backup.parse_jsonl(json.dumps(entry), "a")
    assert err.value.field == "lines.1" and "content-addressed" in err.value.message
    assert backup.parse_jsonl(b"  \n\r\n", "a") == []
