"""Mem0 conformance: the examples of Mem0's own documentation, run with the real ``mem0ai`` 2.2.1
``MemoryClient`` / ``AsyncMemoryClient`` against the live app (uvicorn on 127.0.0.1, LocalShardBackend, the
scripted model as the app's extractor). Every documented call either works as documented or is a 422 whose
message (what the client's exception shows) names the parameter. The README's "Mem0: what differs" table
lists the 422s and differences found here.

Sources (docs.mem0.ai, the mem0ai/mem0 repository's ``docs/``): platform/quickstart, platform/features/
v2-memory-filters ("Memory Filters"), platform/features/timestamp ("Memory Timestamps"),
platform/features/feedback-mechanism, api-reference/memory/{get-memories, search-memories, batch-update,
batch-delete}, and the client's own signatures (``mem0/client/main.py``, ``types.py``).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memclient import MemoryClient as Memclient
from testkit.scripted_llm import Reply, ScriptedLLM, tool_call
from tests.auto_memory import messages_text
from tests.serve_apps.conftest import Served, serve_local

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="mem0-"))

APP, KEY, SHARED = "conf", "mem0-conformance-key-0123456789", "mem0-shared-key-0123456789"
KEYS = {APP: KEY, "conf-a": SHARED, "conf-b": SHARED}
FACTS = {  # what the scripted extractor remembers of a conversation, with the categories it gives
    "I'm travelling to SF": ["travel"],
    "I paid the invoice for the new laptop": ["finance"],
    "My Q1 budget is 4000 euros": ["finance"],
    "I love pizza with olives": ["food"],
    "I run every morning": ["health"],
    "Buy cheap pills now": ["spam"],
}


def _extract(request: dict[str, Any]) -> Reply:
    text = messages_text(request, "user")
    conversation = text.split("New conversation", 1)[-1]
    return Reply(tool_calls=tuple(tool_call("memory_add", {"memory": fact, "topics": cats})
                                  for fact, cats in FACTS.items() if fact in conversation))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with ScriptedLLM([_extract] * 500) as llm, serve_local(
            Path(tmp_path_factory.mktemp("mem0-conformance")), hashing_embedder, api_keys=KEYS,
            extractor={"base_url": llm.base_url, "model": "scripted", "policy": "append_only",
                       "job_timeout_s": 20}) as served:
        yield served


@pytest.fixture(scope="module")
def c(live: Served) -> Any:
    from mem0 import MemoryClient

    return MemoryClient(api_key=KEY, host=f"{live.url}/mem0")


def _refused(call: Any, name: str) -> str:
    """The call is a 422 whose exception message names ``name``."""
    from mem0.exceptions import ValidationError as Mem0Invalid

    with pytest.raises(Mem0Invalid) as info:
        call()
    assert name in str(info.value), str(info.value)
    return str(info.value)


def _texts(result: dict[str, Any]) -> set[str]:
    return {m["memory"] for m in result["results"]}


@pytest.fixture(scope="module")
def seeded(c: Any) -> dict[str, Any]:
    """The filters page's memories: user_123 (some in runs, one with an app), user_1..3, finance_bot's."""
    out: dict[str, Any] = {}
    for fact in ("I paid the invoice for the new laptop", "I love pizza with olives", "Buy cheap pills now"):
        out[fact] = c.add([{"role": "user", "content": fact}], user_id="user_123",
                          metadata={"source": "email" if "invoice" in fact else "chat"})["results"][0]
    out["run"] = c.add([{"role": "user", "content": "My Q1 budget is 4000 euros"}], user_id="user_123",
                       run_id="run_456", app_id="app1", metadata={"type": "semantic"})["results"][0]
    out["health"] = c.add([{"role": "user", "content": "I run every morning"}], user_id="user_123",
                          agent_id="finance_bot", metadata={"type": "episodic"})["results"][0]
    for u in ("user_1", "user_2", "user_3"):
        c.add(f"{u} likes tea", user_id=u, infer=False)
    return out


# ------------------------------------------------------------------ errors
def test_errors_carry_their_message_as_the_client_reads_it(live: Served, c: Any) -> None:
    from mem0 import AsyncMemoryClient, MemoryClient

    with pytest.raises(ValueError, match="X-Memcluster-App") as info:  # the key opens two apps
        MemoryClient(api_key=SHARED, host=f"{live.url}/mem0")
    assert "key opens several apps" in str(info.value)
    with pytest.raises(ValueError, match="unknown API key"):
        AsyncMemoryClient(api_key="no-such-key-0123456789", host=f"{live.url}/mem0")
    msg = _refused(lambda: c.search("x"), "filters.user_id")  # no filter: it would read every user by omission
    assert msg.startswith("filters.user_id: filters are required")
    with live.client() as http:  # memcluster's own shape stays, detail is added
        r = http.post("/mem0/v3/memories/search/", json={"query": "x"}, headers={"Authorization": f"Token {KEY}"})
        body = r.json()
        assert r.status_code == 422 and body["field"] == "filters.user_id" and body["error"] == "ValidationError"
        assert body["detail"] == f"filters.user_id: {body['message']}"
        r = http.post("/mem0/v3/memories/add/", content=b"x" * 70_000,
                      headers={"Authorization": f"Token {KEY}", "Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["detail"]


# ------------------------------------------------------------------ quickstart
def test_quickstart_add_search_get_all(c: Any) -> None:
    messages = [{"role": "user", "content": "I'm travelling to SF"},
                {"role": "assistant", "content": "Have a great trip!"}]
    added = c.add(messages, user_id="alex")
    assert [(r["event"], r["memory"]) for r in added["results"]] == [("ADD", "I'm travelling to SF")]
    found = c.search("Where am I travelling?", filters={"user_id": "alex"})["results"]
    assert [m["memory"] for m in found] == ["I'm travelling to SF"]
    assert 0.0 <= found[0]["score"] <= 1.0 and found[0]["categories"] == ["travel"]
    listed = c.get_all(filters={"AND": [{"user_id": "alex"}]})
    assert listed["count"] == 1 and _texts(listed) == {"I'm travelling to SF"}


# ------------------------------------------------------------------ timestamps
def test_timestamp_on_add_is_the_memory_created_at(c: Any) -> None:
    five_days_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(days=5)
    out = c.add([{"role": "user", "content": "I'm travelling to SF"}], user_id="user1",
                timestamp=int(five_days_ago.timestamp()))["results"]
    got = c.get(out[0]["id"])
    assert datetime.fromisoformat(got["created_at"]) == five_days_ago
    january_2023 = 1672531200
    raw = c.add("I'm travelling to SF in 2023", user_id="user1b", timestamp=january_2023, infer=False)["results"]
    assert datetime.fromisoformat(c.get(raw[0]["id"])["created_at"]) == datetime(2023, 1, 1, tzinfo=UTC)
    scoped = c.add("I'm travelling to LA", user_id="user1b", agent_id="travel", timestamp=january_2023,
                   infer=False)["results"][0]["id"]
    got = c.get(scoped)
    assert (got["agent_id"], got["created_at"][:10], got["updated_at"][:10]) == ("travel", "2023-01-01", "2023-01-01")
    assert c.add("I'm travelling to LA", user_id="user1b", agent_id="travel", infer=False)["results"][0]["id"] == scoped
    c.delete(scoped)
    old = c.get_all(filters={"AND": [{"user_id": "user1b"}, {"created_at": {"lt": "2023-01-02"}}]})
    assert _texts(old) == {"I'm travelling to SF in 2023"}
    _refused(lambda: c.add("x", user_id="user1c", timestamp="yesterday", infer=False), "timestamp")
    _refused(lambda: c.add("x", user_id="user1c", timestamp=4102444800, infer=False), "timestamp")  # 2100


def test_timestamp_on_update_is_the_memory_updated_at(c: Any) -> None:
    mid = c.add("Kim owns a red bike", user_id="kim", infer=False)["results"][0]["id"]
    at = datetime(2024, 3, 1, 12, tzinfo=UTC)
    updated = c.update(mid, metadata={"k": 1}, timestamp=int(at.timestamp()))
    assert datetime.fromisoformat(updated["updated_at"]) == at
    assert datetime.fromisoformat(c.get(mid)["updated_at"]) == at
    _refused(lambda: c.update(mid, timestamp=True), "timestamp")
    moved = c.update(mid, text="Kim owns a blue bike")  # new text: a new id, linked by history
    assert moved["id"] != mid and [h["event"] for h in c.history(moved["id"])] == ["ADD", "UPDATE"]
    _refused(lambda: c.add("I fly to Oslo", user_id="kim", expiration_date="2030-01-31"), "expiration_date")


def test_start_and_end_date_on_get_all(c: Any) -> None:
    c.add("Lou was born in Lyon", user_id="lou", timestamp=1_500_000_000, infer=False)  # 2017-07-14
    c.add("Lou lives in Nice", user_id="lou", infer=False)
    assert _texts(c.get_all(filters={"user_id": "lou"}, start_date="2030-01-01")) == set()
    assert _texts(c.get_all(filters={"user_id": "lou"}, end_date="2017-07-14")) == {"Lou was born in Lyon"}
    today = datetime.now(UTC).date().isoformat()
    assert _texts(c.get_all(filters={"user_id": "lou"}, start_date=today)) == {"Lou lives in Nice"}
    assert len(c.get_all(filters={"user_id": "lou"}, start_date="2017-01-01", end_date=today)["results"]) == 2
    _refused(lambda: c.get_all(filters={"user_id": "lou"}, start_date="July"), "start_date")


# ------------------------------------------------------------------ filters (Memory Filters page)
def test_entity_filters_and_wildcards(c: Any, seeded: dict[str, Any]) -> None:
    assert len(c.get_all(filters={"AND": [{"user_id": "user_123"}]})["results"]) == 5
    everyone = c.get_all(filters={"AND": [{"user_id": "*"}]})["results"]
    assert {"user_1", "user_2", "user_3", "user_123"} <= {m["user_id"] for m in everyone}
    in_runs = c.get_all(filters={"AND": [{"user_id": "user_123"}, {"run_id": "*"}]})
    assert _texts(in_runs) == {"My Q1 budget is 4000 euros"}
    scoped = c.get_all(filters={"AND": [{"user_id": "user_123"}, {"run_id": "*"}, {"app_id": "*"}]})
    assert _texts(scoped) == {"My Q1 budget is 4000 euros"}
    three = c.get_all(filters={"AND": [{"user_id": {"in": ["user_1", "user_2", "user_3"]}}]})
    assert _texts(three) == {"user_1 likes tea", "user_2 likes tea", "user_3 likes tea"}
    agent = c.get_all(filters={"AND": [{"agent_id": "finance_bot"}, {"user_id": {"in": ["user_123", "user_1"]}}]})
    assert _texts(agent) == {"I run every morning"}
    not_agent = c.get_all(filters={"AND": [{"user_id": "user_123"}, {"agent_id": "*"},
                                           {"agent_id": {"ne": "old_agent"}}]})
    assert _texts(not_agent) == {"I run every morning"}
    # a filter that names no user reaches every user of the app (an agent's or a run's memories)
    assert _texts(c.get_all(filters={"AND": [{"agent_id": "finance_bot"}]})) == {"I run every morning"}
    assert _texts(c.get_all(filters={"AND": [{"agent_id": "finance_bot"}, {"run_id": "*"}]})) == set()
    either = c.get_all(filters={"OR": [{"user_id": "user_123"}, {"run_id": "run_456"}]})
    assert len(either["results"]) == 5
    c.add("Likes to play cricket and plays cricket on weekends.", user_id="alice", agent_id="sports-agent",
          metadata={"category": "hobbies"}, infer=False)
    c.add("Plays tennis on Mondays", user_id="bob", agent_id="travel-agent", infer=False)
    c.add("Alice has a cat", user_id="alice", infer=False)
    hobbies = c.search("What are Alice's hobbies?", filters={"OR": [
        {"user_id": "alice"}, {"agent_id": {"in": ["travel-agent", "sports-agent"]}}]})["results"]
    assert {(m["user_id"], m["memory"]) for m in hobbies} == {
        ("alice", "Likes to play cricket and plays cricket on weekends."), ("alice", "Alice has a cat"),
        ("bob", "Plays tennis on Mondays")}
    guarded = c.get_all(filters={"AND": [{"agent_id": "*"}, {"agent_id": {"ne": "finance_bot"}}]})
    assert _texts(guarded) == {"Likes to play cricket and plays cricket on weekends.", "Plays tennis on Mondays"}
    typed = c.get_all(filters={"OR": [{"metadata": {"type": "semantic"}}, {"metadata": {"type": "episodic"}}]})
    assert _texts(typed) == {"My Q1 budget is 4000 euros", "I run every morning"}
    _refused(lambda: c.get_all(filters={}), "filters.user_id")


def test_content_filters(c: Any, seeded: dict[str, Any]) -> None:
    def u(*conds: dict[str, Any]) -> set[str]:
        return _texts(c.get_all(filters={"AND": [{"user_id": "user_123"}, *conds]}))

    assert u({"keywords": {"icontains": "PIZZA"}}) == {"I love pizza with olives"}
    assert u({"keywords": {"contains": "Q1"}}) == {"My Q1 budget is 4000 euros"}
    assert u({"keywords": {"contains": "q1"}}) == set()
    finance = {"I paid the invoice for the new laptop", "My Q1 budget is 4000 euros"}
    assert u({"categories": {"in": ["finance", "health"]}}) == finance | {"I run every morning"}
    assert u({"categories": {"contains": "fin"}}) == finance
    assert u({"metadata": {"source": "email"}}) == {"I paid the invoice for the new laptop"}
    assert u({"OR": [{"metadata": {"type": "semantic"}}, {"metadata": {"type": "episodic"}}]}) == {
        "My Q1 budget is 4000 euros", "I run every morning"}
    assert u({"NOT": {"categories": {"in": ["spam", "test"]}}}) == finance | {
        "I love pizza with olives", "I run every morning"}
    assert u({"OR": [{"categories": "finance"}, {"categories": "health"}]}) == finance | {"I run every morning"}
    assert u({"keywords": {"icontains": "invoice"}}, {"categories": {"in": ["finance"]}},
             {"created_at": {"gte": "2024-01-01T00:00:00Z"}}) == {"I paid the invoice for the new laptop"}
    ids = [seeded["run"]["id"], seeded["health"]["id"]]
    assert u({"memory_ids": ids}) == {"My Q1 budget is 4000 euros", "I run every morning"}
    assert u({"metadata": {"source": {"ne": "email"}}}) == finance - {"I paid the invoice for the new laptop"} | {
        "I love pizza with olives", "Buy cheap pills now", "I run every morning"}
    _refused(lambda: u({"metadata": {"type": {"in": ["semantic"]}}}), "filters.AND.1.metadata.type.in")
    _refused(lambda: u({"metadata": {"score": 0.5}}), "filters.AND.1.metadata.score")
    _refused(lambda: u({"keywords": {"regex": "x"}}), "filters.AND.1.keywords.regex")
    _refused(lambda: u({"color": "red"}), "filters.AND.1.color")


def test_time_filters(c: Any, seeded: dict[str, Any]) -> None:
    today = datetime.now(UTC).date()
    def u(*conds: dict[str, Any]) -> int:
        return len(c.get_all(filters={"AND": [{"user_id": "user_123"}, *conds]})["results"])

    assert u({"created_at": {"gte": "2024-01-01T00:00:00Z"}}, {"created_at": {"lt": "2024-02-01T00:00:00Z"}}) == 0
    assert u({"created_at": {"gte": today.isoformat(), "lte": today.isoformat()}}) == 5  # a date: the whole day
    assert u({"updated_at": {"gte": "2024-12-01T00:00:00Z"}}) == 5
    assert u({"created_at": {"gt": today.isoformat()}}) == 0
    assert u({"timestamp": {"lt": (today + timedelta(days=1)).isoformat()}}) == 5
    assert u({"created_at": {"eq": today.isoformat()}}) == 5
    _refused(lambda: u({"created_at": {"gte": "soon"}}), "filters.AND.1.created_at.gte")
    assert c.get_all(filters={"AND": [{"created_at": {"gte": "2024-01-01"}},  # every user's
                                      {"created_at": {"lt": "2024-02-01"}}]})["results"] == []
    assert len(c.get_all(filters={"AND": [{"created_at": {"gt": "2024-01-01T00:00:00Z"}}]})["results"]) >= 5
    # the get-memories API reference example: July 2024 (none here)
    assert c.get_all(filters={"AND": [{"user_id": "alex"}, {"created_at": {"gte": "2024-07-01",
                                                                             "lte": "2024-07-31"}}]})["results"] == []


def test_search_filters_categories_and_fields(c: Any, seeded: dict[str, Any]) -> None:
    found = c.search("What are my financial goals?",
                     filters={"AND": [{"user_id": "user_123"}, {"categories": {"contains": "finance"}}]})["results"]
    assert {m["memory"] for m in found} == {"I paid the invoice for the new laptop", "My Q1 budget is 4000 euros"}
    by_param = c.search("budget", filters={"user_id": "user_123"}, categories=["finance"])["results"]
    assert {m["memory"] for m in by_param} <= {"I paid the invoice for the new laptop", "My Q1 budget is 4000 euros"}
    assert by_param
    slim = c.search("budget", filters={"user_id": "user_123"}, fields=["memory", "score"])["results"]
    assert slim and all(set(m) == {"id", "memory", "score"} for m in slim)
    wild = c.search("budget", filters={"AND": [{"user_id": "user_123"}, {"run_id": "*"}]})["results"]
    assert [m["memory"] for m in wild] == ["My Q1 budget is 4000 euros"]
    dense = c.search("Q1 budget", filters={"user_id": "user_123"}, keyword_search=False, top_k=1)["results"]
    assert [m["memory"] for m in dense] == ["My Q1 budget is 4000 euros"]
    _refused(lambda: c.search("budget", filters={"user_id": "user_123"}, fields=["colour"]), "fields.0")
    _refused(lambda: c.search("budget", filters={"user_id": "user_123"}, colour="red"), "colour")


# ------------------------------------------------------------------ threshold and score
def test_score_is_relevance_0_to_1_and_threshold_filters_on_it(c: Any) -> None:
    facts = ["Rei adopted a cat named Miso", "Rei's cat Miso likes tuna", "Rei works as a nurse in Porto"]
    c.add([{"role": "user", "content": f} for f in facts], user_id="rei", infer=False)
    q = "Does Rei's cat Miso like tuna?"
    every = c.search(q, filters={"user_id": "rei"}, top_k=10)["results"]
    scores = [m["score"] for m in every]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert every[0]["memory"] == "Rei's cat Miso likes tuna"
    for k in (1, 2, 10):  # a filter the shard cannot apply itself finds the same memories
        plain = c.search(q, filters={"user_id": "rei"}, top_k=k)["results"]
        always = c.search(q, filters={"AND": [{"user_id": "rei"}, {"created_at": {"gte": "2000-01-01"}}]},
                          top_k=k)["results"]
        assert [m["id"] for m in always] == [m["id"] for m in plain] and len(plain) == min(k, 3)
    floor = (scores[0] + scores[-1]) / 2
    kept = c.search(q, filters={"user_id": "rei"}, top_k=10, threshold=floor)["results"]
    assert kept and [m["id"] for m in kept] == [m["id"] for m in every if m["score"] >= floor]
    assert len(kept) < len(every)
    assert c.search(q, filters={"user_id": "rei"}, threshold=1.0)["results"] == []
    unrelated = c.search("quantum chromodynamics lattice", filters={"user_id": "rei"}, top_k=10)["results"]
    assert max((m["score"] for m in unrelated), default=0.0) < scores[0]
    _refused(lambda: c.search(q, filters={"user_id": "rei"}, threshold=1.5), "threshold")


# ------------------------------------------------------------------ every other parameter
def test_parameters_memcluster_does_not_apply_are_422_naming_them(c: Any) -> None:
    f = {"user_id": "pat"}
    c.add("Pat plays go", user_id="pat", infer=False, async_mode=True)  # add always finishes before answering
    assert c.search("go", filters=f, rerank=False, latest_only=True, show_expired=False)["results"]
    assert c.get_all(filters=f, latest_only=True, show_expired=False)["results"]
    assert c.search("go", filters=f, version="v2", output_format="v1.1")["results"]  # the older docs' spelling
    _refused(lambda: c.search("go", filters=f, version="v1"), "version")
    for name, value in (("rerank", True), ("reference_date", "2024-01-01"), ("show_expired", True),
                        ("latest_only", False), ("metadata", {"a": 1})):
        _refused(lambda n=name, v=value: c.search("go", filters=f, **{n: v}), name)
    for name, value in (("show_expired", True), ("latest_only", False), ("keywords", "x")):
        _refused(lambda n=name, v=value: c.get_all(filters=f, **{n: v}), name)
    for name, value in (("custom_categories", [{"hobby": "hobbies"}]), ("custom_instructions", "only food"),
                        ("agent_custom_instructions", "x"), ("structured_data_schema", {"type": "object"}),
                        ("enable_graph", True), ("immutable", True), ("includes", "food"), ("color", "red")):
        _refused(lambda n=name, v=value: c.add("Pat plays chess", user_id="pat", infer=False, **{n: v}), name)
    added = c.add("Pat plays bridge", filters={"user_id": "pat", "agent_id": "cards"}, infer=False)["results"]
    assert c.get(added[0]["id"])["agent_id"] == "cards"  # the client's typed options put ids in filters
    _refused(lambda: c.add("x", filters={"user_id": "pat", "metadata": {"a": 1}}, infer=False), "filters.metadata")
    _refused(lambda: c.add("x", user_id="pat", filters={"user_id": "pam"}, infer=False), "user_id")
    c.delete(added[0]["id"])
    mid = c.get_all(filters=f)["results"][0]["id"]
    _refused(lambda: c.update(mid, text="Pat plays go well", color="red"), "color")
    assert [m["memory"] for m in c.get_all(filters=f)["results"]] == ["Pat plays go"]  # nothing half-written


def test_batch_update_delete_feedback_history_delete_all_and_reset(c: Any, seeded: dict[str, Any]) -> None:
    a = c.add("Quinn likes jazz", user_id="quinn", infer=False)["results"][0]["id"]
    b = c.add("Quinn likes rock", user_id="quinn", agent_id="dj", infer=False)["results"][0]["id"]
    out = c.batch_update([{"memory_id": a, "text": "Quinn likes free jazz"}, {"memory_id": b, "metadata": {"x": 1}}])
    assert out["message"] == "Successfully updated 2 memories"
    assert _texts(c.get_all(filters={"user_id": "quinn"})) == {"Quinn likes free jazz", "Quinn likes rock"}
    assert c.get(b)["metadata"] == {"x": 1}
    from mem0.exceptions import MemoryNotFoundError

    with pytest.raises(MemoryNotFoundError, match=re.escape("memories.1.memory_id")):
        c.batch_delete([{"memory_id": b}, {"memory_id": f"nope.{b.partition('.')[2]}"}])
    assert c.get(b)["memory"] == "Quinn likes rock"  # nothing deleted: one id was unknown
    _refused(lambda: c.batch_update([{"memory_id": b, "text": "Quinn likes pop"},
                                     {"memory_id": a, "metadata": {"bad key": 1}}]), "memories.1.metadata.bad key")
    assert c.get(b)["memory"] == "Quinn likes rock"  # nothing updated: one item was refused
    fb = c.feedback(b, feedback="NEGATIVE", feedback_reason="not relevant")
    assert (fb["feedback"], fb["feedback_reason"]) == ("NEGATIVE", "not relevant")
    assert c.get(b)["metadata"] == {"x": 1}
    assert c.batch_delete([{"memory_id": b}])["message"] == "Successfully deleted 1 memories"
    assert [h["event"] for h in c.history(b)] == ["ADD", "DELETE"]
    c.add("Quinn likes blues", user_id="quinn", run_id="r9", infer=False)
    c.delete_all(filters={"AND": [{"user_id": "quinn"}, {"run_id": "*"}]})
    assert _texts(c.get_all(filters={"user_id": "quinn"})) == {"Quinn likes free jazz"}
    _refused(lambda: c.delete_all(colour="red"), "colour")
    assert c.delete(c.get_all(filters={"user_id": "quinn"})["results"][0]["id"], delete_linked=True)["message"]
    entities = {(e["type"], e["name"]) for e in c.users()["results"]}
    assert {("user", "user_123"), ("agent", "finance_bot"), ("run", "run_456"), ("app", "app1")} <= entities
    c.delete_users(app_id="app1")
    assert c.get_all(filters={"AND": [{"user_id": "user_123"}, {"app_id": "*"}]})["results"] == []


def test_async_client_documented_calls(live: Served) -> None:
    from mem0 import AsyncMemoryClient

    async def run() -> None:
        c = AsyncMemoryClient(api_key=KEY, host=f"{live.url}/mem0")
        added = await c.add([{"role": "user", "content": "I run every morning"}], user_id="sam",
                            timestamp=1_700_000_000)
        mid = added["results"][0]["id"]
        assert (await c.get(mid))["created_at"].startswith("2023-11-14")
        found = await c.search("morning run", filters={"AND": [{"user_id": "sam"}, {"categories": {"in": ["health"]}}]},
                               threshold=0.1)
        assert [m["id"] for m in found["results"]] == [mid] and 0.1 <= found["results"][0]["score"] <= 1
        listed = await c.get_all(filters={"user_id": "sam"}, start_date="2023-11-14", end_date="2023-11-14")
        assert listed["count"] == 1
        await c.batch_update([{"memory_id": mid, "text": "I run every evening"}])
        (new,) = (await c.get_all(filters={"AND": [{"user_id": "sam"}, {"keywords": {"icontains": "evening"}}]}))[
            "results"]
        moved = await c.update(new["id"], metadata={"pace": "slow"}, timestamp="2024-05-01T08:00:00Z")
        assert moved["updated_at"].startswith("2024-05-01T08:00:00") and moved["metadata"] == {"pace": "slow"}
        assert [h["event"] for h in await c.history(new["id"])] == ["ADD", "UPDATE"]
        assert (await c.feedback(new["id"], feedback="POSITIVE"))["feedback"] == "POSITIVE"
        other = (await c.add("Sam swims", user_id="sam", run_id="pool", infer=False))["results"][0]["id"]
        assert ("run", "pool") in {(e["type"], e["name"]) for e in (await c.users())["results"]}
        assert (await c.batch_delete([{"memory_id": other}]))["message"] == "Successfully deleted 1 memories"
        with pytest.raises(Exception, match=re.escape("filters.user_id")):
            await c.search("x", filters={})
        with pytest.raises(Exception, match="rerank"):
            await c.search("x", filters={"user_id": "sam"}, rerank=True)
        await c.delete_all(user_id="sam")
        assert (await c.get_all(filters={"user_id": "sam"}))["results"] == []
        await c.add("Sam sails", user_id="sam", infer=False)
        await c.delete_users(user_id="sam")
        assert (await c.get_all(filters={"user_id": "sam"}))["results"] == []

    asyncio.run(run())


def test_seed_example_category_filter_and_limit(live: Served) -> None:
    """trpc-agent-py's Mem0 guide: ``search(query, filters={"user_id", "category"}, limit=5)`` (Mem0 open
    source's names): ``category`` matches the memory's category or its metadata ``category``."""
    from mem0 import AsyncMemoryClient

    async def run() -> None:
        c = AsyncMemoryClient(api_key=KEY, host=f"{live.url}/mem0")
        await c.add("Tia's favorite food is ramen", user_id="tia", metadata={"category": "preferences"}, infer=False)
        await c.add("Tia's favorite color is teal", user_id="tia", infer=False)
        await c.add([{"role": "user", "content": "I love pizza with olives"}], user_id="tia")  # category food
        got = await c.search(query="favorite food", filters={"user_id": "tia", "category": "preferences"}, limit=5)
        assert [m["memory"] for m in got["results"]] == ["Tia's favorite food is ramen"]
        food = await c.search(query="favorite food", filters={"user_id": "tia", "category": "food"}, limit=5)
        assert [m["memory"] for m in food["results"]] == ["I love pizza with olives"]
        assert len((await c.search(query="favorite", filters={"user_id": "tia"}, limit=1))["results"]) == 1
        with pytest.raises(Exception, match="limit"):
            await c.search(query="favorite", filters={"user_id": "tia"}, limit=1, top_k=2)

    asyncio.run(run())


def test_reset_deletes_every_memory(live: Served, c: Any) -> None:
    for user in ("vic", "wes"):
        c.add(f"{user} uses zsh", user_id=user, agent_id="zz", infer=False)
        c.add(f"{user} uses vim", user_id=user, infer=False)
    c.delete_all(user_id="*", agent_id="zz")  # every user's memories of agent zz
    assert _texts(c.get_all(filters={"user_id": {"in": ["vic", "wes"]}})) == {"vic uses vim", "wes uses vim"}
    assert c.reset()["message"]
    with Memclient(live.url, api_key=KEY, timeout=30) as mc:
        assert all(mc.read(APP, u) == [] for u in ("user_123", "alex", "lou", "quinn"))
    assert c.get_all(filters={"user_id": "*"})["results"] == []
