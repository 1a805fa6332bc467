"""The mem0ai 1.x client's routes (what trpc-agent-py 1.2.0's Mem0 code calls): add at ``/v1/memories/``,
search and list at ``/v2/memories/...`` with entity ids at the top level, ANDed with ``filters``.
(The 1.x client itself, with trpc-agent-py, runs in tests/integrations/test_trpc_mem0.py.)"""

from __future__ import annotations

import httpx


def test_v1_add_and_v2_search_and_list_take_top_level_entity_ids(client: httpx.Client) -> None:
    for user, agent, text in (("wim", "chef", "Wim is vegetarian"), ("wim", "travel", "Wim flies to Oslo"),
                              ("xia", "chef", "Xia is vegan")):
        r = client.post("/mem0/v1/memories/", json={"messages": [{"role": "user", "content": text}], "user_id": user,
                                                   "agent_id": agent, "infer": False, "output_format": "v1.1"})
        assert r.status_code == 200, r.text
        assert [m["event"] for m in r.json()["results"]] == ["ADD"]

    def found(route: str, body: dict[str, object]) -> list[str]:
        r = client.post(f"/mem0/v2/memories/{route}", json=body)
        assert r.status_code == 200, r.text
        return sorted(m["memory"] for m in r.json()["results"])

    assert found("search/", {"query": "Wim", "user_id": "wim"}) == ["Wim flies to Oslo", "Wim is vegetarian"]
    # top-level ids AND filters: an OR alternative without a user is scoped by the top-level user
    either = {"OR": [{"user_id": "wim"}, {"agent_id": "chef"}]}
    assert found("search/", {"query": "vegetarian vegan", "user_id": "wim", "filters": either}) == \
        ["Wim flies to Oslo", "Wim is vegetarian"]
    assert found("search/", {"query": "Wim", "user_id": "wim", "agent_id": "travel"}) == ["Wim flies to Oslo"]
    assert found("", {"user_id": "xia"}) == ["Xia is vegan"]
    assert found("", {"user_id": "wim", "filters": {"agent_id": "chef"}}) == ["Wim is vegetarian"]
    r = client.post("/mem0/v2/memories/search/", json={"query": "Wim"})
    assert r.status_code == 422 and r.json()["field"] == "filters.user_id"  # no user anywhere: refused


def test_a_parameter_without_a_name_is_refused_naming_where_it_was(client: httpx.Client) -> None:
    r = client.post("/mem0/v1/memories/", json={"": None, "messages": "hi", "user_id": "wim"})
    assert r.status_code == 422 and r.json()["field"] == "body" and "unknown parameter ''" in r.json()["message"]
    r = client.delete("/mem0/v1/memories/?=false")
    assert r.status_code == 422 and r.json()["field"] == "query", r.text
