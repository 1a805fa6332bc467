"""The Mem0-compatible API on the local cluster, driven by the real `mem0ai` MemoryClient (sync and
async): the same scenario's results equal what memcluster's own API (memclient) returns."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from memclient import MemoryClient as Memclient
from serve_apps.mem0.map import score_of

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="mem0-"))

pytestmark = pytest.mark.ray

KEYS = {"app1": "mem0-key-one-0123456789", "app2": "mem0-key-two-0123456789"}
AGENT, RUN = "mem0_agent_id", "mem0_run_id"


@pytest.fixture(scope="module")
def base(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.serve_apps.protocol_cluster import deployed

    with deployed(serve_port, tmp_path_factory.mktemp("mem0-data"), name="memmem0", prefix="/m0", keys=KEYS) as url:
        yield url


def _client(base: str, app: str = "app1") -> Any:
    from mem0 import MemoryClient

    return MemoryClient(api_key=KEYS[app], host=f"{base}/mem0")


def _ours(base: str, app: str = "app1") -> Memclient:
    return Memclient(base, api_key=KEYS[app], timeout=30)


def _eid(mem0_id: str) -> str:
    return mem0_id.partition(".")[0]


def test_ping_validates_the_key(base: str) -> None:
    from mem0 import MemoryClient

    assert _client(base).project_id == "app1"  # /v1/ping/ answered for the key's app
    with pytest.raises(ValueError, match="401 Unauthorized"):
        MemoryClient(api_key="not-a-key", host=f"{base}/mem0")


def test_add_search_list_equal_memclusters_own_api(base: str) -> None:
    c = _client(base)
    facts = ["Alice is vegetarian", "Alice cooks pasta on Fridays", "Alice dislikes mushrooms",
             "Alice drinks green tea", "Alice bakes sourdough bread"]
    added = c.add([{"role": "user", "content": f} for f in facts[:3]], user_id="alice", agent_id="chef",
                  run_id="r1", metadata={"source": "onboarding"}, infer=False)
    assert [r["event"] for r in added["results"]] == ["ADD"] * 3
    assert [r["memory"] for r in added["results"]] == facts[:3]
    c.add([{"role": "user", "content": f} for f in facts[3:]], user_id="alice", agent_id="barista", infer=False)
    got = c.get(added["results"][0]["id"])
    assert (got["memory"], got["user_id"], got["agent_id"], got["run_id"], got["metadata"]) == (
        facts[0], "alice", "chef", "r1", {"source": "onboarding"})

    ours = _ours(base)
    for filters, meta in (({"AND": [{"user_id": "alice"}, {"agent_id": "chef"}]}, {AGENT: "chef"}),
                          ({"user_id": "alice", "run_id": "r1"}, {RUN: "r1"}),
                          ({"user_id": "alice"}, None)):
        mine = c.search("what does Alice eat", filters=filters, top_k=4)["results"]
        theirs = ours.search("app1", "alice", "what does Alice eat", max_results=4, metadata_filter=meta)
        # the same hits; Mem0's score is their relevance clamped to 0..1, best first
        want = sorted(((h.entry.id, h.entry.text, score_of(h.relevance)) for h in theirs), key=lambda t: (-t[2], t[0]))
        assert [(_eid(m["id"]), m["memory"], m["score"]) for m in mine] == want
        assert mine
    either = c.search("Alice", filters={"AND": [{"user_id": "alice"},
                                                {"OR": [{"agent_id": "chef"}, {"agent_id": "barista"}]}]}, top_k=10)
    assert {m["memory"] for m in either["results"]} == set(facts)
    only = c.search("Alice", filters={"user_id": "alice", "agent_id": {"in": ["barista"]}})
    assert {m["agent_id"] for m in only["results"]} == {"barista"}

    pages = [c.get_all(filters={"user_id": "alice"}, page=p, page_size=2) for p in (1, 2, 3)]
    assert [p["count"] for p in pages] == [5, 5, 5]
    assert [len(p["results"]) for p in pages] == [2, 2, 1]
    assert pages[0]["previous"] is None and pages[0]["next"] and pages[2]["next"] is None
    listed = [_eid(m["id"]) for p in pages for m in p["results"]]
    assert listed == [e.id for e in ours.read("app1", "alice", 100)]
    chef = c.get_all(filters={"AND": [{"user_id": "alice"}, {"agent_id": "chef"}]})
    assert [_eid(m["id"]) for m in chef["results"]] == [
        e.id for e in ours.read("app1", "alice", 100, metadata_filter={AGENT: "chef"})]


def test_update_history_delete_and_delete_all(base: str) -> None:
    c = _client(base)
    first = c.add("Bob lives in Porto", user_id="bob", agent_id="a1", metadata={"k": 1}, infer=False)["results"][0]
    c.add("Bob plays chess", user_id="bob", agent_id="a2", infer=False)
    updated = c.update(first["id"], text="Bob lives in Lisbon")
    assert updated["memory"] == "Bob lives in Lisbon" and updated["id"] != first["id"]
    assert (updated["agent_id"], updated["metadata"]) == ("a1", {"k": 1})
    again = c.update(updated["id"], metadata={"k": 2})
    assert again["id"] == updated["id"] and again["metadata"] == {"k": 2}
    history = c.history(updated["id"])
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
        ("ADD", None, "Bob lives in Porto"), ("UPDATE", "Bob lives in Porto", "Bob lives in Lisbon")]
    assert c.delete(updated["id"])["message"]
    assert [h["event"] for h in c.history(updated["id"])] == ["ADD", "UPDATE", "DELETE"]
    from mem0.exceptions import MemoryNotFoundError

    with pytest.raises(MemoryNotFoundError):
        c.get(updated["id"])
    c.add("Bob drinks coffee", user_id="bob", agent_id="a2", infer=False)
    c.add("Bob runs marathons", user_id="bob", agent_id="a3", infer=False)
    c.delete_all(user_id="bob", agent_id="a2")
    assert [m["memory"] for m in c.get_all(filters={"user_id": "bob"})["results"]] == ["Bob runs marathons"]
    entities = {(e["type"], e["name"]): e["total_memories"] for e in c.users()["results"]}
    assert entities[("user", "bob")] == 1 and entities[("agent", "a3")] == 1
    c.delete_users(agent_id="a3")
    assert c.get_all(filters={"user_id": "bob"})["results"] == []


def test_infer_goes_through_ingest(base: str) -> None:
    c = _client(base)
    out = c.add([{"role": "user", "content": "I moved to Berlin last spring"},
                 {"role": "assistant", "content": "Noted that you moved to Berlin."}],
                user_id="cora", agent_id="travel")
    assert out["results"] and {r["event"] for r in out["results"]} <= {"ADD", "UPDATE"}
    ours = _ours(base)
    entries = ours.read("app1", "cora", 100)
    assert entries and all(e.metadata.get(AGENT) == "travel" for e in entries)
    assert {_eid(r["id"]) for r in out["results"]} == {e.id for e in entries}
    assert any("Berlin" in e.text for e in entries)
    hits = ours.recall("app1", "cora", "Berlin")["hits"]  # the turns were archived by the ingest path
    assert "I moved to Berlin last spring" in [h["content"] for h in hits]


def test_users_and_apps_are_isolated(base: str) -> None:
    a1, a2 = _client(base, "app1"), _client(base, "app2")
    mine = a1.add("Dana's locker code is 4711", user_id="dana", infer=False)["results"][0]
    assert a1.search("locker code", filters={"user_id": "eve"})["results"] == []
    assert a2.search("locker code", filters={"user_id": "dana"})["results"] == []
    assert a2.get_all(filters={"user_id": "dana"})["results"] == []
    from mem0.exceptions import MemoryNotFoundError

    with pytest.raises(MemoryNotFoundError):
        a2.get(mine["id"])
    with pytest.raises(MemoryNotFoundError):
        a2.delete(mine["id"])
    assert a1.get(mine["id"])["memory"] == "Dana's locker code is 4711"


def test_bad_input_and_unsupported_features(base: str) -> None:
    from mem0.exceptions import MemoryError as Mem0Error
    from mem0.exceptions import ValidationError as Mem0Invalid

    c = _client(base)
    with pytest.raises(Mem0Invalid, match=re.escape("filters.user_id")):
        c.search("x")
    with pytest.raises(Mem0Invalid, match=re.escape("metadata.mem0_agent_id")):
        c.add("x", user_id="fay", metadata={"mem0_agent_id": "forged"}, infer=False)
    with pytest.raises(Mem0Invalid, match=re.escape("metadata.bad key")):
        c.add("x", user_id="fay", metadata={"bad key": 1}, infer=False)
    with pytest.raises(Mem0Error, match="summaries"):
        c.get_summary({"user_id": "fay"})
    with pytest.raises(Mem0Error, match="webhooks"):
        c.get_webhooks("p1")
    with pytest.raises(Mem0Error, match="memory exports"):
        c.create_memory_export("{}", user_id="fay")


def test_async_client(base: str) -> None:
    from mem0 import AsyncMemoryClient

    async def run() -> None:
        c = AsyncMemoryClient(api_key=KEYS["app2"], host=f"{base}/mem0")
        added = await c.add("Gus collects stamps", user_id="gus", agent_id="hobby", infer=False,
                            timestamp=1_700_000_000)  # written back through the shard actor's restore
        mid = added["results"][0]["id"]
        assert (await c.get(mid))["created_at"].startswith("2023-11-14T22:13:20")
        found = await c.search("stamps", filters={"AND": [{"user_id": "gus"}, {"agent_id": "hobby"}]})
        assert [m["id"] for m in found["results"]] == [mid]
        listed = await c.get_all(filters={"user_id": "gus"}, page=1, page_size=10)
        assert listed["count"] == 1
        new = await c.update(mid, text="Gus collects coins")
        assert [h["event"] for h in await c.history(new["id"])] == ["ADD", "UPDATE"]
        assert (await c.get(new["id"]))["memory"] == "Gus collects coins"
        other = (await c.add("Gus owns a kite", user_id="gus", infer=False))["results"][0]["id"]
        assert (await c.delete(other))["message"]
        assert [h["event"] for h in await c.history(other)] == ["ADD", "DELETE"]
        await c.delete_all(user_id="gus")
        assert (await c.get_all(filters={"user_id": "gus"}))["results"] == []

    asyncio.run(run())
    assert _ours(base, "app2").read("app2", "gus", 10) == []


def test_expiration_date_on_add_and_update(base: str) -> None:
    from datetime import UTC, datetime

    from mem0.exceptions import ValidationError as Mem0Invalid

    c, ours = _client(base), _ours(base)
    added = c.add("Hal's conference badge is 88", user_id="hal", expiration_date="2030-01-31", infer=False)
    mid = added["results"][0]["id"]
    (entry,) = ours.read("app1", "hal", 10)
    assert entry.id == _eid(mid) and entry.expires_at == datetime(2030, 2, 1, tzinfo=UTC)  # gone from Feb 1st
    assert c.get(mid)["expiration_date"] == "2030-01-31"
    assert [m["expiration_date"] for m in c.get_all(filters={"user_id": "hal"})["results"]] == ["2030-01-31"]
    moved = c.update(mid, expiration_date="2031-06-30")
    assert moved["id"] == mid and moved["expiration_date"] == "2031-06-30"
    assert ours.get("app1", "hal", _eid(mid)).expires_at == datetime(2031, 7, 1, tzinfo=UTC)
    text = c.update(mid, text="Hal's conference badge is 89")  # names no expiry: kept
    assert text["expiration_date"] == "2031-06-30"
    cleared = c.update(text["id"], expiration_date=None)
    assert cleared["id"] == text["id"] and cleared["expiration_date"] is None
    assert ours.get("app1", "hal", _eid(text["id"])).expires_at is None
    plain = c.add("Hal likes tea", user_id="hal", infer=False)["results"][0]["id"]
    assert c.get(plain)["expiration_date"] is None
    for bad in ("2030-13-01", "31/01/2030", "2030-01-31T00:00:00Z", "2001-01-01", "9999-12-31"):
        with pytest.raises(Mem0Invalid, match="expiration_date"):
            c.add("never stored", user_id="hal-bad", expiration_date=bad, infer=False)
        with pytest.raises(Mem0Invalid, match="expiration_date"):
            c.update(plain, expiration_date=bad)
    with pytest.raises(Mem0Invalid, match="expiration_date"):
        c.add("I fly to Oslo on Monday", user_id="hal-bad", expiration_date="2030-01-31")  # infer=True
    assert ours.read("app1", "hal-bad", 10) == []
    assert c.get(plain)["expiration_date"] is None


def test_threshold_filters_on_relevance_in_hybrid_search(base: str) -> None:
    c, ours = _client(base), _ours(base)
    facts = ["Rei adopted a cat named Miso", "Rei's cat Miso likes tuna", "Rei works as a nurse in Porto",
             "Rei drinks green tea", "Rei plays the cello on Sundays"]
    c.add([{"role": "user", "content": f} for f in facts], user_id="rei", infer=False)
    q = "Does Rei's cat Miso like tuna?"
    every = ours.search("app1", "rei", q, max_results=10)
    assert len(every) >= 3 and all(h.relevance is not None for h in every)
    floor = (max(h.relevance or 0.0 for h in every) + min(h.relevance or 0.0 for h in every)) / 2
    kept = c.search(q, filters={"user_id": "rei"}, top_k=10, threshold=floor)["results"]
    ranked = sorted(every, key=lambda h: (-(h.relevance or 0.0), h.entry.id))  # Mem0: best score first
    want = [h.entry.id for h in ranked if (h.relevance or 0.0) >= floor]
    assert want and len(want) < len(every)
    assert [_eid(m["id"]) for m in kept] == want
    assert [m["score"] for m in kept] == [score_of(h.relevance) for h in ranked if (h.relevance or 0.0) >= floor]
    assert c.search(q, filters={"user_id": "rei"}, top_k=10, threshold=1.0)["results"] == []
