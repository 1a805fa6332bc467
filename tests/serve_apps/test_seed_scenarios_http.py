"""The seed scenarios end to end through the memcluster HTTP API.

Each scenario is what an agent does: it POSTs the session's events to
``/v1/apps/{app}/users/{user}/sessions/{session}/events``, polls ``GET /v1/jobs/{id}`` and reads
back with ``GET /memories`` and ``POST /memories/search``. The extractor is the real
:class:`~memcore.extraction.llm.LLMExtractor` (``openai`` client) talking to the scripted
OpenAI-compatible server over HTTP; the stores are real (Qdrant Edge, Tantivy, SQLite archive).
The scripted model answers the same way under every policy, so what differs is what the
shard's policy does with the proposal. Faults at the end: the job reports what happened and the
cursor stays where the seeds say.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from memcore.model import UserKey
from testkit.scripted_llm import Reply, ScriptedLLM, small_id, tool_call
from tests.auto_memory import extractor_settings, remember_tokens, turns
from tests.seed_scenarios import (
    ASSISTANT_TURNS,
    DEC2,
    EPISODES,
    GO21,
    GO23,
    GO_AFTER_UPDATE,
    GOAL,
    GOAL_TURNS,
    JUN16,
    LOOKALIKES,
    MAR1,
    MAY30,
    ORDINARY,
    QUESTIONS,
    STORIES,
    STORIES_TURNS,
    VISIT,
    VISIT_4PM,
)
from tests.serve_apps.conftest import Served

APP, USER = "seeds", "writer"
BASE = f"/v1/apps/{APP}/users/{USER}"
MakeServer = Callable[..., Served]


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def at(event: dict[str, Any]) -> str:
    """The event's timestamp as the API writes times (UTC, ``Z``)."""
    return iso(datetime.fromisoformat(event["timestamp"]))


def session(day: datetime, *said: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"id": f"{day:%m%d}-{i}", "role": role, "content": text, "timestamp": iso(day + timedelta(minutes=i))}
            for i, (role, text) in enumerate(said)]


class Agent:
    """An agent's view of memcluster for one user: ingest sessions, read and search memories."""

    def __init__(self, served: Served) -> None:
        self.http = served.client()

    def ingest(self, session_id: str, events: Sequence[dict[str, Any]], *, expect: str = "done") -> dict[str, Any]:
        r = self.http.post(f"{BASE}/sessions/{session_id}/events", json={"events": list(events)})
        assert r.status_code in (200, 202), r.text
        job = self.wait(r.json()["job_id"])
        assert job["status"] == expect, job
        return job

    def wait(self, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            r = self.http.get(f"/v1/jobs/{job_id}")
            assert r.status_code == 200, r.text
            job: dict[str, Any] = r.json()
            if job["status"] not in ("queued", "running") or time.monotonic() > deadline:
                return job
            time.sleep(0.02)

    def entries(self) -> list[dict[str, Any]]:
        r = self.http.get(f"{BASE}/memories", params={"limit": 100})
        assert r.status_code == 200, r.text
        entries: list[dict[str, Any]] = r.json()["entries"]
        return entries

    def texts(self) -> list[str]:
        return sorted(e["text"] for e in self.entries())

    def found(self, query: str, needle: str) -> bool:
        r = self.http.post(f"{BASE}/memories/search", json={"query": query, "max_results": 3})
        assert r.status_code == 200, r.text
        return any(needle in h["entry"]["text"] for h in r.json()["hits"])


def agent(make_server: MakeServer, llm: ScriptedLLM, policy: str, **extractor: Any) -> Agent:
    served = make_server(extractor=extractor_settings(llm.base_url, policy=policy, **extractor))
    return Agent(served)


def done_cleanly(job: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """A finished job with no rejected call or stage failure, whose cursor reached the last event."""
    assert job["counts"].get("rejected", 0) == 0 and job["errors"] == [], job
    assert job["cursor"] == at(last), job
    return job


# --------------------------------------------------------------- seven short stories


def tell_stories(a: Agent, llm: ScriptedLLM) -> dict[str, Any]:
    llm.push([tool_call("memory_add", {"memory": STORIES, "topics": ["writing"]})])
    first = session(MAY30, *STORIES_TURNS)
    done_cleanly(a.ingest("may-30", first), first[-1])
    llm.push(lambda req: [tool_call("memory_update", {"memory_id": small_id(req, "seven short stories"),
                                                      "memory": GOAL, "topics": ["writing", "goals"]})])
    second = session(JUN16, *GOAL_TURNS)
    return done_cleanly(a.ingest("jun-16", second), second[-1])


def test_seven_stories_survive_the_weekly_goal_under_preserve_history(make_server: MakeServer,
                                                                      scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "preserve_history")
    job = tell_stories(a, scripted_llm)
    (op,) = job["operations"]
    assert op["action"] == "add" and "not an enrichment" in op["reason"]
    assert a.texts() == [STORIES, GOAL]
    assert a.found("How many short stories has the user completed?", "seven")


def test_seven_stories_are_lost_under_merge_similar(make_server: MakeServer, scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "merge_similar")
    job = tell_stories(a, scripted_llm)
    assert job["operations"][0]["action"] == "update"
    assert a.texts() == [GOAL]
    assert not a.found("How many short stories has the user completed?", "seven")


# --------------------------------------------------------------- Go 1.21 -> 1.23


@pytest.mark.parametrize(("policy", "expected"), GO_AFTER_UPDATE)
def test_go_version_update_under_each_policy(make_server: MakeServer, scripted_llm: ScriptedLLM, policy: str,
                                             expected: list[str]) -> None:
    a = agent(make_server, scripted_llm, policy)
    scripted_llm.push([tool_call("memory_add", {"memory": GO21, "topics": ["go"]})])
    first = session(MAY30, ("user", "Our project needs at least Go 1.21."))
    done_cleanly(a.ingest("go-1", first), first[-1])
    scripted_llm.push(lambda req: [tool_call("memory_update", {"memory_id": small_id(req, "Go 1.21"),
                                                               "memory": GO23})])
    second = session(JUN16, ("user", "We raised the minimum to Go 1.23."))
    done_cleanly(a.ingest("go-2", second), second[-1])
    assert a.texts() == expected
    assert a.found("Which Go version does the project require?", "1.23")


# --------------------------------------------------------------- changed facts that look alike
@pytest.mark.parametrize(("old", "new"), LOOKALIKES)
def test_changed_facts_are_not_merged(make_server: MakeServer, scripted_llm: ScriptedLLM, old: str,
                                      new: str) -> None:
    a = agent(make_server, scripted_llm, "preserve_history")
    scripted_llm.push([tool_call("memory_add", {"memory": old})])
    a.ingest("before", session(MAY30, ("user", old)))
    scripted_llm.push([tool_call("memory_add", {"memory": new})],  # proposed as an add ...
                      lambda req: [tool_call("memory_update", {"memory_id": small_id(req, old.rstrip(".")),
                                                               "memory": new})])  # ... then as an update
    first = a.ingest("after", session(JUN16, ("user", new)))
    assert first["operations"][0]["action"] == "add"
    assert a.texts() == sorted([old, new])
    second = a.ingest("again", session(JUN16 + timedelta(days=1), ("user", new)))
    assert second["operations"][0]["status"] == "skipped"  # the new version exists now: an exact duplicate
    assert a.texts() == sorted([old, new])


# --------------------------------------------------------------- enrichment of the same event
@pytest.mark.parametrize("form", ["add", "update"])
def test_visit_enriched_with_4pm_is_merged(make_server: MakeServer, scripted_llm: ScriptedLLM, form: str) -> None:
    a = agent(make_server, scripted_llm, "preserve_history")
    scripted_llm.push([tool_call("memory_add", VISIT)])
    a.ingest("visit", session(DEC2, ("user", "Alice visited Bob yesterday.")))
    (old,) = a.entries()
    if form == "add":
        scripted_llm.push([tool_call("memory_add", VISIT_4PM)])
    else:
        scripted_llm.push(lambda req: [tool_call("memory_update",
                                                 {**VISIT_4PM, "memory_id": small_id(req, "Alice visited")})])
    job = a.ingest("visit-detail", session(DEC2 + timedelta(hours=2), ("user", "Oh, and the visit was at 4pm.")))
    (op,) = job["operations"]
    assert op["action"] == "update" and op["memory_id"] == old["id"]
    (entry,) = a.entries()
    assert entry["text"] == VISIT_4PM["memory"] and entry["event_time"] == "2025-12-01T16:00:00Z"
    assert entry["participants"] == ["Alice", "Bob"] and entry["created_at"] == old["created_at"]


# --------------------------------------------------------------- assistant-only information
ASSISTANT_SESSION = session(MAR1, *ASSISTANT_TURNS)


def test_assistant_details_are_lost_without_the_episode_stage(make_server: MakeServer,
                                                              scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "preserve_history")
    scripted_llm.push(ORDINARY)
    done_cleanly(a.ingest("mar-1", ASSISTANT_SESSION), ASSISTANT_SESSION[-1])
    assert len(a.texts()) == 2
    for question, answer in QUESTIONS:
        assert not a.found(question, answer)
        assert not any(answer in t for t in a.texts())


def test_assistant_details_are_recoverable_with_the_episode_stage(make_server: MakeServer,
                                                                  scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "preserve_history", assistant_episodes=True)
    scripted_llm.push(ORDINARY, EPISODES)
    job = done_cleanly(a.ingest("mar-1", ASSISTANT_SESSION), ASSISTANT_SESSION[-1])
    assert job["counts"]["episodes"] == 2 and job["counts"]["applied"] == 4
    episodes = [e for e in a.entries() if e["source"] == "assistant"]
    assert len(episodes) == 2 and {e["kind"] for e in episodes} == {"episode"}
    assert sorted(e["provenance"] for e in episodes) == [["mar-1/0301-0", "mar-1/0301-1"],
                                                         ["mar-1/0301-2", "mar-1/0301-3"]]
    for question, answer in QUESTIONS:
        assert a.found(question, answer), question


# --------------------------------------------------------------- faults through the API
def test_extractor_timeout_leaves_the_cursor_for_a_retry(make_server: MakeServer, scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "append_only", job_timeout_s=0.5)
    scripted_llm.push(Reply(tool_calls=(tool_call("memory_add", {"memory": "too late"}),), delay=2.0))
    events = turns(2, text="token-{i}")
    failed = a.ingest("s1", events, expect="failed")
    assert "timed out" in failed["reason"] and failed["cursor"] is None and a.entries() == []
    scripted_llm.push(remember_tokens)
    retried = a.ingest("s1", events)  # the same session again: the whole delta is still there
    assert retried["counts"]["events"] == 2 and retried["cursor"] == at(events[-1])
    assert len(a.entries()) == 2 and not any("too late" in t for t in a.texts())


def test_garbage_tool_calls_are_rejected_one_by_one(make_server: MakeServer, scripted_llm: ScriptedLLM) -> None:
    a = agent(make_server, scripted_llm, "merge_similar")
    scripted_llm.push([
        tool_call("memory_add", "{not json"),
        tool_call("memory_teleport", {"memory": "x"}),
        tool_call("memory_update", {"memory_id": 42, "memory": "no such memory"}),
        tool_call("memory_add", {"memory": "The user drinks green tea every morning"}),
    ])
    events = turns(2)
    job = a.ingest("s1", events)
    assert job["counts"]["applied"] == 1 and job["counts"]["rejected"] == 3
    assert any("not valid JSON" in e for e in job["errors"]) and any("memory_teleport" in e for e in job["errors"])
    assert job["cursor"] == at(events[-1])  # extraction completed: the cursor moves
    assert a.texts() == ["The user drinks green tea every morning"]


class _FailThirdUpsert:
    """The shard's vector store, failing its third upsert (one op of five)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.upserts = inner, 0

    def upsert(self, entries: Any, vectors: Any) -> None:
        self.upserts += 1
        if self.upserts == 3:
            raise OSError("disk full (injected)")
        self.inner.upsert(entries, vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_store_failing_one_op_of_five(make_server: MakeServer) -> None:
    served = make_server()  # verbatim extractor: one add per turn
    core = served.backend.core(UserKey(app=APP, user=USER))
    core.service.vectors = _FailThirdUpsert(core.service.vectors)
    a, events = Agent(served), turns(5)
    job = a.ingest("s1", events, expect="partial")  # some operations failed: the job says so
    assert [o["status"] for o in job["operations"]] == ["applied", "applied", "failed", "applied", "applied"]
    assert job["counts"]["failed"] == 1 and "disk full" in job["errors"][0]
    assert job["cursor"] == at(events[-1])  # per-op failures do not hold the cursor
    assert sorted(e["provenance"] for e in a.entries()) == [["s1/e0"], ["s1/e1"], ["s1/e3"], ["s1/e4"]]
    for op in job["operations"]:  # every applied operation is really there, read back through the API
        if op["status"] == "applied":
            assert a.http.get(f"{BASE}/memories/{op['effective_id']}").status_code == 200
