"""Mem0 user ids as memcluster users (``serve_apps.mem0.map.member`` / ``mem0_user``): only ids that need it
are escaped (an id with ``/``, or holding ``~0`` / ``~1``), so ids stored before escaping existed keep their
user; the mapping round-trips and no two Mem0 ids share a memcluster user (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memcore.errors import ValidationError
from serve_apps.mem0.map import escaped, mem0_user, member

# ids made mostly of the characters the escapes are about, and any text besides
_TRICKY = st.text(alphabet=st.sampled_from(["~", "/", "0", "1", "2", "a", "é"]), min_size=1, max_size=24)
IDS = _TRICKY | st.text(min_size=1, max_size=40)


def _member(value: str) -> str:
    try:
        return member(value)
    except ValidationError:
        assume(False)
        raise


@settings(max_examples=400, deadline=None)
@given(IDS)
def test_round_trips_and_keeps_plain_ids(value: str) -> None:
    user = _member(value)
    assert mem0_user(user) == value
    assert "/" not in user
    if "/" not in value and not escaped(value):
        assert user == value  # stored before escaping existed: the same memcluster user
    else:
        assert escaped(user) and user != value


@settings(max_examples=400, deadline=None)
@given(IDS, IDS)
def test_two_ids_are_two_users(a: str, b: str) -> None:
    assume(a != b)
    assert _member(a) != _member(b)


@pytest.mark.parametrize(("mem0", "user"), [
    ("alice", "alice"), ("a~b", "a~b"), ("a~", "a~"), ("~", "~"), ("a~2", "a~2"),  # unchanged, as stored before
    ("my_app/alice", "my_app~1alice"), ("a~b/c", "a~0b~1c"),  # '/' escapes every '~' too
    ("a~0b", "a~00b"), ("a~1", "a~01"),  # already looks escaped: escaped again
])
def test_examples(mem0: str, user: str) -> None:
    assert (member(mem0), mem0_user(user)) == (user, mem0)


@pytest.mark.parametrize("bad", ["", ".", "..", "%2e", "a\u200bb", "x" * 129])
def test_the_identifier_rule_still_applies(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        member(bad)
    assert caught.value.field == "user_id"
