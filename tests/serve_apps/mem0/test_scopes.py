"""Mem0 scopes through ``mem0ai``'s real MemoryClient against the live app (uvicorn + LocalShardBackend, an
extractor on the scripted OpenAI-compatible server for ``infer=True``): memories of different ``agent_id``,
``run_id`` or ``app_id`` stay different memories, and update / delete / get_all / search of one never touch
the other. Seed 002's trpc-agent-py ``app_name/user_id`` users (with ``/``) work against ``/mem0``."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memclient import MemoryClient as Memclient
from serve_apps.mem0.map import AGENT, member, scope_key
from testkit.scripted_llm import Reply, ScriptedLLM, tool_call
from tests.serve_apps.conftest import Served, serve_local

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="mem0-"))

APP, KEY = "scopes", "mem0-scopes-key-0123456789"
FACT = "Erin is allergic to nuts."


def _extract(request: dict[str, Any]) -> Reply:
    """The extractor states the one fact whatever the conversation (as an LLM would, without event time)."""
    return Reply(tool_calls=(tool_call("memory_add", {"memory": FACT}),))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with ScriptedLLM([_extract] * 200) as llm, serve_local(
            Path(tmp_path_factory.mktemp("mem0-scopes")), hashing_embedder, api_keys={APP: KEY},
            extractor={"base_url": llm.base_url, "model": "scripted", "job_timeout_s": 20}) as served:
        yield served


@pytest.fixture
def c(live: Served) -> Any:
    from mem0 import MemoryClient

    return MemoryClient(api_key=KEY, host=f"{live.url}/mem0")


@pytest.mark.parametrize("infer", [False, True])
@pytest.mark.parametrize("field", ["agent_id", "run_id", "app_id"])
def test_two_scopes_are_two_memories(c: Any, field: str, infer: bool) -> None:
    user = f"erin-{field}-{infer}"
    first = c.add(FACT, user_id=user, infer=infer, **{field: "chef"})["results"]
    second = c.add(FACT, user_id=user, infer=infer, **{field: "travel"})["results"]
    assert [(r["event"], r["memory"]) for r in first] == [("ADD", FACT)]
    assert [(r["event"], r["memory"]) for r in second] == [("ADD", FACT)]
    chef, travel = first[0]["id"], second[0]["id"]
    assert chef != travel

    def listed(value: str) -> list[tuple[str, str]]:
        found = c.get_all(filters={"AND": [{"user_id": user}, {field: value}]})["results"]
        return [(m["id"], m[field]) for m in found]

    assert listed("chef") == [(chef, "chef")] and listed("travel") == [(travel, "travel")]
    assert sorted(m["id"] for m in c.get_all(filters={"user_id": user})["results"]) == sorted([chef, travel])
    hits = c.search("nuts allergy", filters={"AND": [{"user_id": user}, {field: "chef"}]})["results"]
    assert [h["id"] for h in hits] == [chef]

    updated = c.update(chef, text="Erin is allergic to peanuts.")
    assert (updated["memory"], updated[field]) == ("Erin is allergic to peanuts.", "chef")
    assert (c.get(travel)["memory"], c.get(travel)[field]) == (FACT, "travel")  # untouched by the update
    c.delete(travel)
    assert c.get(updated["id"])["memory"] == "Erin is allergic to peanuts."  # untouched by the delete
    assert [m["id"] for m in c.get_all(filters={"user_id": user})["results"]] == [updated["id"]]
    c.delete_all(user_id=user, **{field: "chef"})
    assert c.get_all(filters={"user_id": user})["results"] == []


def test_the_same_content_in_one_scope_is_one_memory(c: Any) -> None:
    first = c.add(FACT, user_id="ivo", agent_id="chef", infer=False)["results"]
    again = c.add(FACT, user_id="ivo", agent_id="chef", infer=False)["results"]
    plain = c.add(FACT, user_id="ivo", infer=False)["results"]  # the user's own scope: another memory
    assert first[0]["id"] == again[0]["id"] != plain[0]["id"]
    assert len(c.get_all(filters={"user_id": "ivo"})["results"]) == 2


def test_trpc_agent_save_keys_with_a_slash(live: Served, c: Any) -> None:
    """Seed 002: trpc-agent-py's Mem0 service uses ``session.save_key`` = ``app_name/user_id`` as Mem0's
    user_id and the trpc session id as run_id."""
    from mem0.exceptions import ValidationError as Mem0Invalid

    alice, other = "my_app/alice", "other_app/alice"
    added = c.add([{"role": "user", "content": "I am vegetarian."}], user_id=alice, run_id="session_1",
                  metadata={"real_role": "user"}, infer=False)["results"]
    c.add("I eat fish.", user_id=other, run_id="session_9", infer=False)
    found = c.search("vegetarian", filters={"user_id": alice})["results"]
    assert [(m["id"], m["user_id"], m["run_id"], m["memory"]) for m in found] == [
        (added[0]["id"], alice, "session_1", "I am vegetarian.")]
    assert c.get(added[0]["id"])["user_id"] == alice
    assert [m["memory"] for m in c.get_all(filters={"user_id": other})["results"]] == ["I eat fish."]
    users = {e["name"] for e in c.users()["results"] if e["type"] == "user"}
    assert {alice, other} <= users
    # REST names the same user with '/' written '~1' (a URL carries it unchanged)
    with Memclient(live.url, api_key=KEY, timeout=30) as mc:
        assert [e.text for e in mc.read(APP, "my_app~1alice")] == ["I am vegetarian."]
    c.delete_users(user_id=alice)  # DELETE /v2/entities/user/my_app%2Falice/
    assert c.get_all(filters={"user_id": alice})["results"] == []
    assert [m["memory"] for m in c.get_all(filters={"user_id": other})["results"]] == ["I eat fish."]
    for bad in ("..", ".", "%2e", ""):
        with pytest.raises(Mem0Invalid, match=re.escape("user_id")):
            c.add("x", user_id=bad, infer=False)


def test_user_ids_stored_before_escaping_keep_their_user(live: Served, c: Any) -> None:
    """A Mem0 user id with ``~`` but no ``/`` (nor ``~0`` / ``~1``) is the same memcluster user as before escapes
    existed: what the server stored for it then (an entry of memcluster user ``erin~work``) is Mem0's still."""
    user = "erin~work"
    with Memclient(live.url, api_key=KEY, timeout=30) as mc:
        stored = mc.add(APP, user, "Erin works from Lisbon.")  # as /mem0 stored Mem0 user erin~work before
        added = c.add("Erin takes the 8:15 train.", user_id=user, infer=False)["results"]
        assert sorted(e.text for e in mc.read(APP, user)) == ["Erin takes the 8:15 train.", "Erin works from Lisbon."]
        found = {m["memory"]: m for m in c.get_all(filters={"user_id": user})["results"]}
        assert set(found) == {"Erin works from Lisbon.", "Erin takes the 8:15 train."}
        before = found["Erin works from Lisbon."]
        assert before["user_id"] == user and before["id"].startswith(f"{stored.id}.")
        assert c.get(before["id"])["memory"] == "Erin works from Lisbon."
        assert c.get(added[0]["id"])["user_id"] == user
        assert user in {e["name"] for e in c.users()["results"] if e["type"] == "user"}
        c.delete_users(user_id=user)
        assert mc.read(APP, user) == []


def test_moving_a_user_stored_with_a_literal_escape(live: Served, c: Any) -> None:
    """docs/identity.md, "Migration": a Mem0 id holding ``~0`` stored before escapes existed is the memcluster user
    of the same text, which Mem0 no longer reads; the documented REST steps move it to ``member`` of the id."""
    old = mem0 = "xav~0ier"
    new = member(mem0)
    assert new == "xav~00ier"
    with Memclient(live.url, api_key=KEY, timeout=30) as mc:
        # as /mem0 stored it then: a plain memory, and one of agent "dj" (its scope key and metadata)
        mc.add(APP, old, "Xavier likes jazz.")
        bass = "Xavier plays bass."
        mc.add(APP, old, bass, metadata={AGENT: "dj"}, key=scope_key({AGENT: "dj"}, bass), ttl_s=3600)
        assert c.get_all(filters={"user_id": mem0})["results"] == []  # unreachable before the move
        for e in mc.read(APP, old, 1000):
            ttl = None if e.expires_at is None else (e.expires_at - datetime.now(UTC)).total_seconds()
            mc.add(APP, new, e.text, topics=e.topics, kind=e.kind, event_time=e.event_time,
                   participants=e.participants, location=e.location, source=e.source,
                   metadata=e.metadata, key=e.key, ttl_s=ttl)
        mc.forget(APP, old)
        assert mc.read(APP, old) == [] and len(mc.read(APP, new)) == 2
    assert sorted(m["memory"] for m in c.get_all(filters={"user_id": mem0})["results"]) == [
        "Xavier likes jazz.", "Xavier plays bass."]
    (dj,) = c.get_all(filters={"AND": [{"user_id": mem0}, {"agent_id": "dj"}]})["results"]
    assert (dj["memory"], dj["agent_id"], dj["user_id"]) == ("Xavier plays bass.", "dj", mem0)
    assert dj["expiration_date"] is not None
    again = c.add("Xavier plays bass.", user_id=mem0, agent_id="dj", infer=False)["results"]
    assert again[0]["id"] == dj["id"]  # the same memory of the scope, not a second one
    c.delete_users(user_id=mem0)
    with Memclient(live.url, api_key=KEY, timeout=30) as mc:
        assert mc.read(APP, new) == []
