"""Mem0's v2 filters (:mod:`serve_apps.mem0.filters`) on entries: the grammar, the 422 paths, the users a
filter reaches, the shard's share (pushdown), and the bare-date rule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memcore.errors import ValidationError
from memcore.metadata import MAX_FILTER_KEYS
from memcore.model import Entry
from serve_apps.mem0 import filters as F
from serve_apps.mem0.map import AGENT, RUN, mem0_id


def _entry(user: str, eid: str, *, text: str = "x", topics: tuple[str, ...] = (), meta: dict[str, Any] | None = None,
           created: datetime = datetime(2024, 7, 31, 23, 30, tzinfo=UTC)) -> Entry:
    return Entry(id=eid, app="a", user=user, text=text, topics=list(topics), metadata=meta or {},
                 created_at=created, updated_at=created)


ALICE = _entry("alice", "e1", text="Invoice paid", topics=("finance",), meta={AGENT: "bot", "n": 1})
BOB = _entry("bob", "e2", text="Pizza night", topics=("food", "fun"), meta={RUN: "r1", "n": "1"},
             created=datetime(2024, 8, 1, tzinfo=UTC))


def _m(flt: dict[str, Any]) -> set[str]:
    tree = F.parse(flt)
    return {e.user for e in (ALICE, BOB) if F.matches(tree, e)}


@pytest.mark.parametrize(("flt", "want"), [
    ({"user_id": "alice"}, {"alice"}),
    ({"AND": [{"user_id": "*"}, {"agent_id": "*"}]}, {"alice"}),
    ({"agent_id": {"ne": "bot"}}, {"bob"}),  # ne matches a memory without the field
    ({"user_id": {"in": ["alice", "bob"]}, "run_id": "r1"}, {"bob"}),
    ({"OR": [{"agent_id": "bot"}, {"run_id": "r1"}]}, {"alice", "bob"}),
    ({"NOT": [{"agent_id": "bot"}, {"run_id": "r1"}]}, set()),  # a list: none of them
    ({"NOT": {"categories": {"in": ["spam", "fun"]}}}, {"alice"}),
    ({"categories": {"contains": "fin"}}, {"alice"}),
    ({"categories": "food", "keywords": {"icontains": "PIZZA"}}, {"bob"}),
    ({"keywords": {"contains": "pizza"}}, set()),
    ({"metadata": {"n": 1}}, {"alice"}),  # types are kept: 1 is not "1"
    ({"metadata": {"n": {"ne": 1}}}, {"bob"}),
    ({"created_at": {"lte": "2024-07-31"}}, {"alice"}),  # a bare date: through its end
    ({"created_at": {"gt": "2024-07-31"}}, {"bob"}),
    ({"created_at": {"eq": "2024-07-31"}}, {"alice"}),
    ({"created_at": {"gte": "2024-07-31T23:30:00Z", "lt": 1722470400}}, {"alice"}),  # Unix seconds: Aug 1st
    ({"timestamp": {"gte": "2024-08-01"}}, {"bob"}),
    ({"category": "food"}, {"bob"}),
    ({"memory_ids": [mem0_id("bob", "e2")]}, {"bob"}),
])
def test_matches(flt: dict[str, Any], want: set[str]) -> None:
    assert _m(flt) == want


@pytest.mark.parametrize(("flt", "field"), [
    ({"AND": []}, "filters.AND"),
    ({"color": "red"}, "filters.color"),
    ({"AND": [{"user_id": "u"}, {"created_at": {"after": "2024-01-01"}}]}, "filters.AND.1.created_at.after"),
    ({"created_at": {"gte": "soon"}}, "filters.created_at.gte"),
    ({"metadata": {"k": {"in": [1]}}}, "filters.metadata.k.in"),
    ({"metadata": {"k": 1.5}}, "filters.metadata.k"),
    ({"metadata": {"mem0_agent_id": "x"}}, "filters.metadata.mem0_agent_id"),
    ({"keywords": "x"}, "filters.keywords"),
    ({"user_id": {"in": []}}, "filters.user_id.in"),
    ({"user_id": ".."}, "filters.user_id"),
    ({"memory_ids": ["nope"]}, "filters.memory_ids"),
    ({"categories": {"in": "x"}}, "filters.categories.in"),
    ({"category": {"in": ["x"]}}, "filters.category"),
])
def test_bad_filters_name_their_place(flt: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        F.parse(flt)
    assert info.value.field == field


def test_the_users_a_filter_reaches() -> None:
    assert F.users_of(F.parse({"AND": [{"user_id": "a"}, {"agent_id": "x"}]})) == {"a"}
    assert F.users_of(F.parse({"OR": [{"user_id": "a"}, {"user_id": {"in": ["b", "c"]}}]})) == {"a", "b", "c"}
    assert F.users_of(F.parse({"AND": [{"user_id": {"in": ["a", "b"]}}, {"user_id": "b"}]})) == {"b"}
    assert F.users_of(F.parse({"OR": [{"user_id": "a"}, {"run_id": "r"}]})) is None  # every user
    assert F.users_of(F.parse({"user_id": "*"})) is F.ALL
    assert F.users_of(F.parse({"memory_ids": [mem0_id("u/1", "e")]})) == {"u/1"}


def test_pushdown_is_the_top_level_equalities_within_the_shards_limit() -> None:
    tree = F.parse({"AND": [{"user_id": "a"}, {"agent_id": "x"}, {"metadata": {"k": 1}}, {"run_id": "*"}]})
    assert F.pushdown(tree) == {AGENT: "x", "k": 1}
    assert F.pushdown(F.parse({"OR": [{"agent_id": "x"}, {"agent_id": "y"}]})) == {}
    many = F.parse({"metadata": {f"k{i}": i for i in range(MAX_FILTER_KEYS + 4)}})
    assert len(F.pushdown(many)) == MAX_FILTER_KEYS
    assert F.matches(many, _entry("u", "e", meta={f"k{i}": i for i in range(MAX_FILTER_KEYS + 4)}))


def test_top_level_parameters_name_themselves() -> None:
    with pytest.raises(ValidationError) as info:
        F.created_between("July", None)
    assert info.value.field == "start_date"
    with pytest.raises(ValidationError) as info:
        F.categories_in(["ok", ""])
    assert info.value.field == "categories.1"
    node = F.created_between(None, "2024-07-31")
    assert node is not None and F.matches(node, ALICE) and not F.matches(node, BOB)
