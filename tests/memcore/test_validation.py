"""One identifier rule (apps, users, sessions, backups, archive rows) and one pydantic-error mapping."""

from __future__ import annotations

import pydantic
import pytest

from jobs.schema import RowError, parse_row
from memcore.backup import BackupEntry
from memcore.errors import ValidationError
from memcore.fields import MAX_ID_CHARS
from memcore.model import Memory
from memcore.validation import check_session, error_of, first_error, make_key, validate

BAD = ["", " a", "a ", "a/b", "x" * (MAX_ID_CHARS + 1), "tab\there", "nul\x00", "zero\u200bwidth",
       "bidi\u202eflip", "bom\ufeff", "private\ue000",
       # ids a URL would change (memclient.segments): dot segments, '/', and their percent-encoded forms
       ".", "..", "%2e", "%2E%2e", "%2f", "a%2Fb", "%252e", "..%2F.."]
GOOD = ["a", "user-42", "Zoë", "用户", "x" * MAX_ID_CHARS, "with space", "...", "100%", "%25", "a.b", "e%20x"]


@pytest.mark.parametrize("value", BAD)
def test_every_identifier_rejects_the_same_values(value: str) -> None:
    for what, call in (("app", lambda: make_key(value, "u")), ("user", lambda: make_key("a", value)),
                       ("session", lambda: check_session(value))):
        with pytest.raises(ValidationError) as exc:
            call()
        assert exc.value.field == what
    with pytest.raises(RowError) as row:
        parse_row({"app": "a", "user": "u", "session": value,
                   "events": [{"id": "e1", "role": "user", "content": "hi", "timestamp": 0}]})
    assert row.value.field == "session"
    with pytest.raises(pydantic.ValidationError):
        BackupEntry.model_validate({"id": "x", "app": value, "user": "u", "text": "t",
                                    "created_at": 0, "updated_at": 0})


@pytest.mark.parametrize("value", GOOD)
def test_every_identifier_accepts_the_same_values(value: str) -> None:
    assert make_key(value, value).user == value and check_session(value) == value


def test_first_error_names_the_field() -> None:
    with pytest.raises(pydantic.ValidationError) as exc:
        Memory.model_validate({"text": "ok", "topics": ["t" * 65]})
    assert first_error(exc.value.errors()) == ("topic longer than 64 characters", "topics")
    assert error_of(exc.value, prefix="entries.3.").field == "entries.3.topics"
    assert first_error([{"loc": ("body", "memories", 0, "text"), "msg": "Value error, bad"}], skip={"body"}) == (
        "bad", "memories.0.text")
    assert first_error([]) == ("invalid value", None)
    with pytest.raises(ValidationError) as bad:
        validate(Memory, {"text": ""}, prefix="memories.1.")
    assert bad.value.field == "memories.1.text"
