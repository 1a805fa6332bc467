from __future__ import annotations

import pytest

from memcore import tools
from memcore.app_policy import ToolMode, ToolPolicy
from memcore.errors import NotFoundError, PermissionDeniedError, ValidationError
from memcore.model import UserKey
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")


def test_agentic_defaults() -> None:
    p = ToolPolicy()
    assert p.enabled_tools(ToolMode.AGENTIC) == {"memory_add", "memory_update", "memory_search", "memory_load"}
    assert p.exposed_tools(ToolMode.AGENTIC) == ["memory_add", "memory_update", "memory_search", "memory_load"]


def test_auto_defaults_enabled_is_not_exposed() -> None:
    p = ToolPolicy()
    assert p.enabled_tools(ToolMode.AUTO) == {"memory_add", "memory_update", "memory_delete", "memory_search"}
    assert p.exposed_tools(ToolMode.AUTO) == ["memory_search"]
    p2 = ToolPolicy(enabled={"memory_load": True, "memory_clear": True}, auto_exposed=["memory_add", "memory_clear"])
    assert p2.exposed_tools(ToolMode.AUTO) == ["memory_add", "memory_search", "memory_load", "memory_clear"]
    with pytest.raises(ValidationError):
        ToolPolicy(enabled={"memory_nuke": True}).enabled_tools(ToolMode.AUTO)


def test_schemas_are_openai_function_tools() -> None:
    schemas = tools.exposed_schemas(ToolPolicy(enabled={"memory_delete": True}), ToolMode.AGENTIC)
    names = [s["function"]["name"] for s in schemas]
    assert names == ["memory_add", "memory_update", "memory_search", "memory_load", "memory_delete"]
    add = schemas[0]["function"]["parameters"]
    assert add["type"] == "object" and add["required"] == ["memory"]
    assert set(add["properties"]) == {"memory", "topics", "memory_kind", "event_time", "participants", "location"}
    assert add["properties"]["memory_kind"]["enum"] == ["fact", "episode"]


def test_execute_roundtrip(service: MemoryService) -> None:
    enabled = sorted(ToolPolicy(enabled={"memory_delete": True}).enabled_tools(ToolMode.AGENTIC))
    added = tools.execute(service, A, "memory_add", {"memory": "Prefers window seats", "topics": ["travel"],
                                                     "memory_kind": "fact"}, enabled=enabled)
    mid = added["memory_id"]
    found = tools.execute(service, A, "memory_search", {"query": "window seat"}, enabled=enabled)
    assert found["count"] == 1 and found["results"][0]["memory_id"] == mid
    upd = tools.execute(service, A, "memory_update", {"memory_id": mid, "memory": "Prefers aisle seats"},
                        enabled=enabled)
    assert upd["previous_id"] == mid and upd["memory_id"] != mid
    loaded = tools.execute(service, A, "memory_load", {"limit": 5}, enabled=enabled)
    assert [r["memory"] for r in loaded["results"]] == ["Prefers aisle seats"]
    assert tools.execute(service, A, "memory_search", {"query": ""}, enabled=enabled)["count"] == 0
    tools.execute(service, A, "memory_delete", {"memory_id": upd["memory_id"]}, enabled=enabled)
    with pytest.raises(NotFoundError):
        tools.execute(service, A, "memory_delete", {"memory_id": upd["memory_id"]}, enabled=enabled)


def test_execute_rejects_disabled_and_bad_arguments(service: MemoryService) -> None:
    enabled = sorted(ToolPolicy().enabled_tools(ToolMode.AGENTIC))
    with pytest.raises(PermissionDeniedError):
        tools.execute(service, A, "memory_clear", {}, enabled=enabled)
    with pytest.raises(ValidationError) as info:
        tools.execute(service, A, "memory_add", {"memory": ""}, enabled=enabled)
    assert info.value.field == "arguments.memory"
    with pytest.raises(ValidationError) as info:
        tools.execute(service, A, "memory_add", {"memory": "x", "memory_kind": "rumour"}, enabled=enabled)
    assert info.value.field == "arguments.memory_kind"
    with pytest.raises(ValidationError) as info:
        tools.execute(service, A, "memory_add", {"memory": "x", "sneaky": 1}, enabled=enabled)
    assert info.value.field == "arguments"
    with pytest.raises(ValidationError):
        tools.execute(service, A, "memory_load", {"limit": 0}, enabled=enabled)
    assert service.count(A) == 0


def test_memory_search_filters_by_topics(service: MemoryService) -> None:
    enabled = ["memory_add", "memory_search"]
    for i in range(20):
        tools.execute(service, A, "memory_add", {"memory": f"Seat note {i}: window seat, window seat"}, enabled=enabled)
    flight = tools.execute(service, A, "memory_add", {"memory": "Prefers a window seat on flights",
                                                      "topics": ["travel", "flights"]}, enabled=enabled)
    train = tools.execute(service, A, "memory_add", {"memory": "Likes a window seat on trains",
                                                     "topics": ["travel"]}, enabled=enabled)
    found = tools.execute(service, A, "memory_search", {"query": "window seat", "topics": ["travel"], "limit": 2},
                          enabled=enabled)
    assert {r["memory_id"] for r in found["results"]} == {flight["memory_id"], train["memory_id"]}
    both = tools.execute(service, A, "memory_search", {"query": "window seat", "topics": ["travel", "flights"],
                                                       "topics_match": "all"}, enabled=enabled)
    assert [r["memory_id"] for r in both["results"]] == [flight["memory_id"]]
    with pytest.raises(ValidationError) as err:
        tools.execute(service, A, "memory_search", {"query": "q", "topics_match": "some"}, enabled=enabled)
    assert err.value.field is not None and "topics_match" in err.value.field
    with pytest.raises(ValidationError):
        tools.execute(service, A, "memory_search", {"query": "q", "topics": "travel"}, enabled=enabled)


def test_recall_is_in_the_vocabulary_with_its_validator() -> None:
    from memcore.vocabulary import MAX_RECALL_RESULTS, RECALL

    params = tools.openai_schema(RECALL)["function"]["parameters"]
    assert params["required"] == ["query"] and params["additionalProperties"] is False
    assert params["properties"]["max_results"]["maximum"] == MAX_RECALL_RESULTS
    assert tools.recall_args({"query": "cat", "session": "s1", "max_results": 3}) == ("cat", "s1", 3)
    assert tools.recall_args({"query": "cat"}) == ("cat", None, 10)
    for bad, field in (({"query": " "}, "arguments.query"), ({}, "arguments.query"),
                       ({"query": "x", "max_results": 0}, "arguments.max_results"),
                       ({"query": "x", "max_results": True}, "arguments.max_results"),
                       ({"query": "x", "session": "a/b"}, "arguments.session"), ({"query": "x", "k": 1}, "arguments")):
        with pytest.raises(ValidationError) as info:
            tools.recall_args(bad)
        assert info.value.field == field, bad


def test_entry_json_shapes(service: MemoryService) -> None:
    e = service.add(A, {"text": "likes tea", "topics": ["drinks"], "metadata": {"k": "v"}})
    tool = tools.entry_json(e, score=0.1234567)
    assert list(tool) == [*tools.TOOL_FIELDS, "score"]
    assert tool["memory_id"] == e.id and tool["memory"] == "likes tea" and tool["memory_kind"] == "fact"
    assert tool["score"] == 0.123457 and tool["updated_at"] == e.updated_at.isoformat()
    resource = tools.entry_json(e, tools.RESOURCE_FIELDS)
    assert resource == {"memory_id": e.id, "memory": "likes tea", "memory_kind": "fact", "topics": ["drinks"],
                        "metadata": {"k": "v"}, "updated_at": e.updated_at.isoformat()}
    dumped = e.model_dump(mode="json")  # the HTTP API's JSON of it: its strings are passed on as they are
    assert tools.entry_json(dumped, tools.RESOURCE_FIELDS) == {**resource, "updated_at": dumped["updated_at"]}


def test_memory_search_min_relevance(service: MemoryService) -> None:
    from memcore.vocabulary import MIN_RELEVANCE_ARG

    enabled = sorted(ToolPolicy().enabled_tools(ToolMode.AGENTIC))
    for text in ("Prefers window seats on flights", "Allergic to peanuts", "Plays chess on Sundays"):
        tools.execute(service, A, "memory_add", {"memory": text}, enabled=enabled)
    schema = tools.openai_schema("memory_search")["function"]["parameters"]["properties"][MIN_RELEVANCE_ARG]
    assert (schema["type"], schema["minimum"], schema["maximum"]) == ("number", -1.0, 1.0)
    every = tools.execute(service, A, "memory_search", {"query": "window seats flights"}, enabled=enabled)
    assert every["count"] == 3 and all(-1.0 <= r["relevance"] <= 1.0 for r in every["results"])
    floor = every["results"][0]["relevance"] - 1e-6
    kept = tools.execute(service, A, "memory_search", {"query": "window seats flights", MIN_RELEVANCE_ARG: floor},
                         enabled=enabled)
    assert [r["memory"] for r in kept["results"]] == ["Prefers window seats on flights"]
    for bad in ("high", 2, True, None):
        with pytest.raises(ValidationError) as info:
            tools.execute(service, A, "memory_search", {"query": "seats", MIN_RELEVANCE_ARG: bad}, enabled=enabled)
        assert info.value.field == f"arguments.{MIN_RELEVANCE_ARG}"
