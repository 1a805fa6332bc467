"""The knowledge-graph and diary routes and tools over real HTTP (uvicorn + LocalShardBackend): bi-temporal
facts, 422 naming fields, unknown entities empty, the diary apart from search, the tools behind the app's
switches, and erasure (forget, a hard delete of the memory a fact came from)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from memcore.vocabulary import GRAPH_TOOLS, KG_ADD, KG_QUERY
from tests.serve_apps.conftest import AUTH_KEYS, Served

U = "/v1/apps/app/users/ann"
ON = {"enabled": dict.fromkeys(GRAPH_TOOLS, True)}


@pytest.fixture
def c(make_server: Callable[..., Served]) -> Iterator[httpx.Client]:
    with make_server(shards=1, tools=ON).client() as client:
        yield client


def add(c: httpx.Client, **fact: object) -> dict[str, object]:
    r = c.post(f"{U}/graph/facts", json=fact)
    assert r.status_code == 201, r.text
    assert r.headers["X-Memcluster-Seq"]
    return r.json()


def test_facts_supersede_and_read_as_of_a_time(c: httpx.Client) -> None:
    first = add(c, subject="Ann", predicate="lives in", object="Paris", valid_from="2024-01-01")
    assert first["created"] is True and first["fact"]["predicate"] == "lives_in"
    assert add(c, subject="ann", predicate="lives_in", object="paris", valid_from="2024-01-01")["created"] is False
    moved = add(c, subject="Ann", predicate="lives_in", object="Lisbon", valid_from="2025-03-01", supersede=True)
    assert [f["object"] for f in moved["closed"]] == ["Paris"]
    assert moved["closed"][0]["valid_to"] == moved["fact"]["valid_from"]
    now = c.get(f"{U}/graph/facts", params={"entity": " ANN ", "as_of": "2025-06-01"}).json()
    assert [f["object"] for f in now["facts"]] == ["Lisbon"] and now["facts"][0]["direction"] == "outgoing"
    then = c.get(f"{U}/graph/facts", params={"entity": "Ann", "as_of": "2024-06-01"}).json()
    assert [f["object"] for f in then["facts"]] == ["Paris"]
    line = c.get(f"{U}/graph/timeline", params={"entity": "Ann"}).json()
    assert [(f["object"], f["current"]) for f in line["timeline"]] == [("Paris", False), ("Lisbon", True)]
    hood = c.get(f"{U}/graph/neighbourhood", params={"entity": "lisbon", "hops": 1}).json()
    assert [e["entity"] for e in hood["entities"]] == ["Lisbon", "Ann"]
    r = c.post(f"{U}/graph/facts/invalidate", json={"subject": "Ann", "predicate": "lives_in", "object": "Lisbon",
                                                    "ended": "2025-09-01"})
    assert r.status_code == 200 and len(r.json()["closed"]) == 1
    assert c.get(f"{U}/graph/facts", params={"entity": "Ann", "as_of": "2025-10-01"}).json()["facts"] == []


def test_unknown_entity_is_empty_and_entities_take_aliases(c: httpx.Client) -> None:
    r = c.get(f"{U}/graph/facts", params={"entity": "Nobody"})
    assert r.status_code == 200 and r.json()["facts"] == []
    assert c.get(f"{U}/graph/entities/Nobody").json() == {"entity": None}
    add(c, subject="Robert", predicate="plays", object="guitar")
    r = c.put(f"{U}/graph/entities", json={"name": "robert", "type": "person", "aliases": ["Bob"]})
    assert r.status_code == 200 and r.json()["aliases"] == ["Bob"]
    assert c.get(f"{U}/graph/entities/bob").json()["entity"]["name"] == "Robert"
    assert [f["object"] for f in c.get(f"{U}/graph/facts", params={"entity": "BOB"}).json()["facts"]] == ["guitar"]


@pytest.mark.parametrize(("body", "field"), [
    ({"subject": "", "predicate": "p", "object": "o"}, "subject"),
    ({"subject": "s", "predicate": "p", "object": "o", "valid_from": "soon"}, "valid_from"),
    ({"subject": "s", "predicate": "p", "object": "o", "valid_from": "2025-02-01", "valid_to": "2025-01-01"},
     "valid_to"),
    ({"subject": "s", "predicate": "p" * 101, "object": "o"}, "predicate"),
])
def test_bad_facts_are_422_naming_the_field_and_write_nothing(c: httpx.Client, body: dict[str, object],
                                                              field: str) -> None:
    r = c.post(f"{U}/graph/facts", json=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert c.get(f"{U}/graph/timeline").json()["timeline"] == []


def test_bad_queries_are_422_naming_the_field(c: httpx.Client) -> None:
    for path, params, field in ((f"{U}/graph/facts", {"entity": "a", "as_of": "x"}, "as_of"),
                                (f"{U}/graph/neighbourhood", {"entity": "a", "hops": 9}, "hops"),
                                (f"{U}/diary", {"since": "2025-02-01", "until": "2025-01-01"}, "until")):
        r = c.get(path, params=params)
        assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_diary_is_per_agent_newest_first_and_not_in_search(c: httpx.Client) -> None:
    for text in ("zqxdiary one", "zqxdiary two", "zqxdiary three"):
        assert c.post(f"{U}/diary", json={"agent": "planner", "text": text}).status_code == 201
    c.post(f"{U}/diary", json={"agent": "coder", "text": "zqxdiary coder"})
    got = c.get(f"{U}/diary", params={"agent": "planner", "limit": 2}).json()
    assert got["total"] == 3 and [e["content"] for e in got["entries"]] == ["zqxdiary three", "zqxdiary two"]
    hits = c.post(f"{U}/memories/search", json={"query": "zqxdiary"}).json()
    assert hits["hits"] == []


def test_graph_tools_run_behind_the_apps_switches(make_server: Callable[..., Served]) -> None:
    with make_server(shards=1).client() as off:
        names = [t["function"]["name"] for t in off.get("/v1/apps/app/tools").json()["tools"]]
        assert not set(GRAPH_TOOLS) & set(names)
        r = off.post(f"{U}/tools/{KG_ADD}", json={"arguments": {"subject": "a", "predicate": "p", "object": "b"}})
        assert r.status_code == 403
    with make_server(shards=1, tools=ON).client() as on:
        names = [t["function"]["name"] for t in on.get("/v1/apps/app/tools").json()["tools"]]
        assert [n for n in names if n in GRAPH_TOOLS] == list(GRAPH_TOOLS)
        r = on.post(f"{U}/tools/{KG_ADD}", json={"arguments": {"subject": "Ann", "predicate": "likes",
                                                               "object": "Italian food"}})
        assert r.status_code == 200 and r.json()["fact"] == "Ann -> likes -> Italian food", r.text
        q = on.post(f"{U}/tools/{KG_QUERY}", json={"arguments": {"entity": "ann"}}).json()
        assert q["count"] == 1 and q["facts"][0]["object"] == "Italian food"
        r = on.post(f"{U}/tools/{KG_ADD}", json={"arguments": {"subject": "Ann", "predicate": "p", "object": "o",
                                                               "valid_from": "not a date"}})
        assert r.status_code == 422 and r.json()["field"] == "arguments.valid_from", r.text


def test_forget_and_hard_delete_of_the_source_memory_erase_facts(c: httpx.Client) -> None:
    mem = c.post(f"{U}/memories", json={"text": "Ann works at Acme"}).json()
    add(c, subject="Ann", predicate="works_at", object="Acme", memories=[mem["id"]])
    add(c, subject="Ann", predicate="likes", object="tea")
    assert c.delete(f"{U}/memories/{mem['id']}", params={"hard": True}).status_code == 204
    assert [f["object"] for f in c.get(f"{U}/graph/facts", params={"entity": "Ann"}).json()["facts"]] == ["tea"]
    c.post(f"{U}/diary", json={"text": "note"})
    gone = c.delete(U).json()
    assert gone["facts"] == 1 and gone["diary_entries"] == 1, gone
    assert c.get(f"{U}/graph/timeline").json()["timeline"] == []


def test_hard_deleting_the_memory_behind_a_supersede_makes_the_old_fact_current_again(c: httpx.Client) -> None:
    add(c, subject="Ann", predicate="lives_in", object="Porto")
    mem = c.post(f"{U}/memories", json={"text": "Ann moved to Lisbon"}).json()
    moved = add(c, subject="Ann", predicate="lives_in", object="Lisbon", memories=[mem["id"]], supersede=True)
    assert [(f["object"], f["ended_by"]) for f in moved["closed"]] == [("Porto", moved["fact"]["fact_id"])]
    assert c.delete(f"{U}/memories/{mem['id']}", params={"hard": True}).status_code == 204
    facts = c.get(f"{U}/graph/facts", params={"entity": "Ann", "predicate": "lives_in"}).json()["facts"]
    assert [(f["object"], f["current"]) for f in facts] == [("Porto", True)]
    assert c.delete(U).status_code == 200


def test_another_apps_key_is_refused(make_server: Callable[..., Served]) -> None:
    with make_server(shards=1, api_keys=AUTH_KEYS).client() as c:
        r = c.post("/v1/apps/app-a/users/ann/graph/facts", json={"subject": "a", "predicate": "p", "object": "b"},
                   headers={"Authorization": f"Bearer {AUTH_KEYS['app-b']}"})
        assert r.status_code == 403


def test_export_then_import_round_trips_the_graph_and_diary(make_server: Callable[..., Served]) -> None:
    with make_server(shards=2).client() as src:
        for user in ("ann", "bob"):
            base = f"/v1/apps/app/users/{user}"
            src.post(f"{base}/graph/facts", json={"subject": user, "predicate": "lives_in", "object": "Paris"})
            src.post(f"{base}/graph/facts", json={"subject": user, "predicate": "lives_in", "object": "Rome",
                                                  "supersede": True})
            src.put(f"{base}/graph/entities", json={"name": user, "aliases": [f"{user}-alias"]})
            src.post(f"{base}/diary", json={"agent": "a", "text": f"note of {user}"})
        exported = src.get("/v1/apps/app/graph/export")
        assert exported.status_code == 200
        body = exported.content
    assert len(body.splitlines()) == 2 * (3 + 3 + 1)  # per user: 3 entities, 3 fact versions, 1 diary entry
    with make_server(shards=1).client() as dst:
        bad = dst.post("/v1/apps/app/graph/import", content=body.replace(b'"fact_id":"f_', b'"fact_id":"f_0', 1))
        assert bad.status_code == 422 and bad.json()["field"].startswith("lines."), bad.text
        assert dst.get(f"{U}/graph/timeline").json()["timeline"] == []  # nothing half-written
        r = dst.post("/v1/apps/app/graph/import", content=body)
        assert r.status_code == 200 and r.json()["users"] == 2, r.text
        assert dst.get("/v1/apps/app/graph/export").content == body
        facts = dst.get(f"{U}/graph/facts", params={"entity": "ann-alias"}).json()["facts"]
        assert [(f["object"], f["current"]) for f in facts] == [("Paris", False), ("Rome", True)]


def test_search_and_preload_include_current_facts_only_when_asked(c: httpx.Client) -> None:
    c.post(f"{U}/memories", json={"text": "Ann enjoys long walks by the river"})
    add(c, subject="Ann", predicate="lives_in", object="Paris", memories=["m-src"])
    add(c, subject="Ann", predicate="lives_in", object="Lisbon", supersede=True)
    plain = c.post(f"{U}/memories/search", json={"query": "where does ann walk"}).json()
    assert "facts" not in plain and plain["hits"]
    both = c.post(f"{U}/memories/search", json={"query": "where does ann walk", "include_facts": True}).json()
    (fact,) = both["facts"]
    assert both["hits"] and fact["object"] == "Lisbon" and fact["text"].startswith("Ann lives in Lisbon (since ")
    tight = c.post(f"{U}/memories/search", json={"query": "ann", "include_facts": True, "max_tokens": 4}).json()
    assert tight["facts"] == []  # a fact that does not fit half the budget is left out
    pre = c.post(f"{U}/preload", json={"budget": 5, "message": "Ann asks about trips", "include_facts": True}).json()
    assert "<facts>" in pre["text"] and "Ann lives in Lisbon" in pre["text"] and "Paris" not in pre["text"]
    assert "<facts>" not in c.post(f"{U}/preload", json={"budget": 5, "message": "Ann"}).json()["text"]
