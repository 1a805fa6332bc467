"""Auto memory in a shard: ingest, delta and cursor, checkers, queue, faults, restart, order.

Real engines (Qdrant Edge, Tantivy, SQLite) with the hashing embedder; the LLM extractor talks
to the scripted OpenAI-compatible server through the real ``openai`` client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from actors.extraction_queue import job_shard, new_job_id
from actors.shard import ShardCore
from memcore.errors import ValidationError
from memcore.extraction.events import ExtractionResult
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.fields import now_utc
from memcore.model import UserKey
from memcore.records import JobRecord
from memcore.service import MemoryService
from testkit.scripted_llm import Reply, ScriptedLLM, messages_text, tool_call
from tests.actors.conftest import MakeCore, done
from tests.auto_memory import T0, extractor_settings, remember_tokens, turns

A = UserKey(app="app", user="alice")
B = UserKey(app="app", user="bob")


def provenance(core: ShardCore, key: UserKey = A) -> list[list[str]]:
    return sorted(e.provenance for e in core.read(key))


# ------------------------------------------------------------------ ids and validation
def test_job_ids_carry_their_shard() -> None:
    assert job_shard(new_job_id(7)) == 7
    for bad in ("", "7", "x-" + "0" * 32, "7-" + "g" * 32, "7-abc", "12345-" + "0" * 32):
        assert job_shard(bad) is None


def test_ingest_validates_events_and_session(make_core: MakeCore) -> None:
    core = make_core()
    with pytest.raises(ValidationError) as bad_role:
        core.ingest(A, "s1", [{"id": "e1", "role": "robot", "content": "x", "timestamp": T0.isoformat()}])
    assert bad_role.value.field == "events.0.role"
    with pytest.raises(ValidationError) as dup:
        core.ingest(A, "s1", turns(1) + turns(1))
    assert dup.value.field == "events"
    for session in ("", " s", "a/b", "x" * 129, "tab\there", "zero\u200bwidth", "bidi\u202eflip", 7):
        with pytest.raises(ValidationError) as bad_session:
            core.ingest(A, session, turns(1))
        assert bad_session.value.field == "session"
    assert core.archive.events.read(A) == []


# ------------------------------------------------------------------ delta and cursor
def test_whole_session_resent_extracts_only_the_delta(make_core: MakeCore) -> None:
    core = make_core()  # verbatim (no base_url), turn granularity
    first = done(core, core.ingest(A, "s1", turns(2)))
    assert first.status == "done" and first.counts["applied"] == 2 and first.cursor == T0 + timedelta(minutes=1)
    second = core.ingest(A, "s1", turns(4))  # the client resends the whole session
    assert second.upto == T0 + timedelta(minutes=3)
    second = done(core, second)
    assert second.counts["events"] == 2 and second.counts["applied"] == 2
    assert second.cursor == T0 + timedelta(minutes=3) == core.archive.sessions.last_extract_at(A, "s1")
    assert provenance(core) == [["s1/e0"], ["s1/e1"], ["s1/e2"], ["s1/e3"]]
    again = core.ingest(A, "s1", turns(4))
    assert again.status == "skipped" and "no new" in (again.reason or "") and again.reason_code == "nothing_new"
    assert len(core.read(A)) == 4


def test_live_verbatim_job_issues_no_existing_entry_search(make_core: MakeCore,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The verbatim extractor ignores existing entries: the timed job wrapper must not hide that."""
    searches: list[UserKey] = []
    real = MemoryService.search

    def counting(self: MemoryService, key: UserKey, *args: Any, **kwargs: Any) -> Any:
        searches.append(key)
        return real(self, key, *args, **kwargs)

    monkeypatch.setattr(MemoryService, "search", counting)
    core = make_core()  # verbatim (no base_url)
    first = done(core, core.ingest(A, "s1", turns(2)))
    second = done(core, core.ingest(A, "s1", turns(4)))  # entries exist now: a search would find them
    assert (first.status, second.status) == ("done", "done")
    assert second.counts["applied"] == 2 and second.counts["existing"] == 0
    assert searches == []
    assert core.jobs.policy == "append_only"


def test_queued_jobs_of_one_session_split_the_delta(make_core: MakeCore) -> None:
    core = make_core(start_workers=False)
    j1 = core.ingest(A, "s1", turns(2))
    j2 = core.ingest(A, "s1", turns(5))  # after the pending job's bound, not the durable cursor
    assert (j1.upto, j2.upto) == (T0 + timedelta(minutes=1), T0 + timedelta(minutes=4))
    assert j2.counts["events"] == 3
    core.jobs.start()
    r1, r2 = done(core, j1), done(core, j2)
    assert (r1.counts["events"], r2.counts["events"]) == (2, 3)
    assert r2.cursor == T0 + timedelta(minutes=4)
    assert provenance(core) == [["s1/e0"], ["s1/e1"], ["s1/e2"], ["s1/e3"], ["s1/e4"]]


def test_llm_sees_only_new_turns_and_existing_memories(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url, policy="append_only"))
    scripted_llm.push(remember_tokens, remember_tokens)
    first = done(core, core.ingest(A, "s1", turns(2, text="my lucky number is token-{i}")))
    assert first.status == "done" and [o["status"] for o in first.operations] == ["applied", "applied"]
    second = done(core, core.ingest(A, "s1", turns(4, text="my lucky number is token-{i}")))
    assert second.status == "done", second
    req = scripted_llm.requests[1]
    conversation = messages_text(req, "user").split("New conversation", 1)[1]
    assert "token-2" in conversation and "token-3" in conversation
    assert "token-0" not in conversation and "token-1" not in conversation
    assert "The user's lucky token-0 is remembered" in messages_text(req, "user")  # shown as existing
    texts = sorted(e.text for e in core.read(A))
    assert texts == [f"The user's lucky token-{i} is remembered" for i in range(4)]
    assert all(e.provenance for e in core.read(A))


# ------------------------------------------------------------------ checkers and guards
def test_declining_checker_is_a_no_op(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url, policy="append_only"), message_threshold=2)
    skipped = core.ingest(A, "s1", turns(2, text="token-{i}"))
    assert skipped.status == "skipped" and "checker declined" in (skipped.reason or "")
    assert skipped.reason_code == "checker"
    assert core.job(skipped.job_id).status == "skipped"
    assert scripted_llm.requests == [] and core.read(A) == [] and core.archive.sessions.last_extract_at(A, "s1") is None
    scripted_llm.push(remember_tokens)
    ran = done(core, core.ingest(A, "s1", turns(3, text="token-{i}")))  # 3 > 2: all three pending turns
    assert ran.status == "done" and ran.counts["events"] == 3
    conversation = messages_text(scripted_llm.requests[0], "user")
    assert all(f"token-{i}" in conversation for i in range(3))


def test_time_interval_checker(make_core: MakeCore) -> None:
    core = make_core(interval_s=3600)
    t0 = now_utc() - timedelta(minutes=5)
    first = done(core, core.ingest(A, "s1", turns(2, t0=t0)))  # never extracted: passes
    assert first.status == "done"
    later = core.ingest(A, "s1", turns(4, t0=t0))  # minutes after the last extraction
    assert later.status == "skipped" and "checker declined" in (later.reason or "")
    assert core.archive.sessions.last_extract_at(A, "s1") == first.cursor


def test_sessions_with_external_context_are_skipped(make_core: MakeCore) -> None:
    core = make_core(skip_external_context=True)
    rag = [*turns(1), {"id": "t1", "role": "tool", "content": "retrieved: the company handbook says ...",
                       "timestamp": (T0 + timedelta(seconds=30)).isoformat(), "external_context": True},
           *turns(1, start=1)]
    job = core.ingest(A, "rag", rag)
    assert job.status == "skipped" and "external context" in (job.reason or "")
    assert job.reason_code == "external_context"
    assert core.read(A) == [] and core.archive.sessions.last_extract_at(A, "rag") is None
    assert [e.id for e in core.archive.events.read(A, "rag")] == ["e0", "e1"]  # still archived for recall
    assert done(core, core.ingest(A, "plain", turns(2, prefix="p"))).status == "done"


def test_external_context_is_extracted_when_the_guard_is_off(make_core: MakeCore) -> None:
    core = make_core()
    events = [*turns(1), {"id": "t1", "role": "tool", "content": "retrieved text", "external_context": True,
                          "timestamp": (T0 + timedelta(seconds=30)).isoformat()}]
    job = done(core, core.ingest(A, "rag", events))
    assert job.status == "done" and provenance(core) == [["rag/e0"]]  # the tool message itself never is


# ------------------------------------------------------------------ queue
def test_full_queue_runs_the_job_in_the_ingest_call(make_core: MakeCore) -> None:
    core = make_core(start_workers=False, queue_size=2)
    users = [UserKey(app="app", user=f"u{i}") for i in range(3)]
    queued = [core.ingest(users[i], "s", turns(2)) for i in range(2)]
    assert [j.status for j in queued] == ["queued", "queued"]
    sync = core.ingest(users[2], "s", turns(2))  # the queue is full: never dropped, run here
    assert sync.status == "done" and sync.sync and sync.counts["applied"] == 2
    assert [core.job(j.job_id).status for j in queued] == ["queued", "queued"]
    core.jobs.start()
    assert [done(core, j).status for j in queued] == ["done", "done"]
    assert all(len(core.read(u)) == 2 for u in users)


def test_fifty_sessions_of_one_user_run_in_ingest_order(make_core: MakeCore) -> None:
    core = make_core(queue_size=10)
    jobs: list[JobRecord] = []
    lock = threading.Lock()
    barrier = threading.Barrier(50)

    def ingest(i: int) -> None:
        barrier.wait()
        job = core.ingest(A, f"session-{i}", turns(1, prefix=f"s{i}-", text=f"session {i} says hello"))
        with lock:
            jobs.append(job)

    threads = [threading.Thread(target=ingest, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    finished = sorted((done(core, j) for j in jobs), key=lambda j: j.seq)
    assert [j.status for j in finished] == ["done"] * 50
    assert any(j.sync for j in finished) and not all(j.sync for j in finished)
    for before, after in pairwise(finished):
        assert before.finished_at and after.started_at and before.finished_at <= after.started_at
    by_session = {e.provenance[0].split("/")[0]: e.updated_at for e in core.read(A)}
    stamps = [by_session[j.session] for j in finished]
    assert stamps == sorted(stamps) and len(set(stamps)) == 50  # applied in ingest order


def test_job_writes_form_one_block_between_api_writes(make_core: MakeCore) -> None:
    core = make_core(start_workers=False)
    job = core.ingest(A, "s1", turns(6, text="job turn {i} about kiwis"))
    stop = threading.Event()

    def api_writes() -> None:
        i = 0
        while not stop.is_set() and i < 200:
            core.add(A, {"text": f"api write {i}"})
            i += 1

    writer = threading.Thread(target=api_writes)
    writer.start()
    time.sleep(0.05)
    core.jobs.start()
    done(core, job)
    stop.set()
    writer.join(30)
    order = [e.text.startswith("User:") or e.text.startswith("Assistant:")
             for e in sorted(core.read(A), key=lambda e: (e.updated_at, e.id))]
    first = order.index(True)
    assert order[first:first + 6] == [True] * 6 and sum(order) == 6


# ------------------------------------------------------------------ faults
def test_extractor_500_fails_and_keeps_the_cursor(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url, policy="append_only"))
    scripted_llm.push(Reply(status=500, body={"error": {"message": "boom", "type": "server_error"}}))
    failed = done(core, core.ingest(A, "s1", turns(2, text="token-{i}")))
    assert failed.status == "failed" and "HTTP 500" in (failed.reason or "") and failed.errors
    assert failed.reason_code == "extractor_error"
    assert failed.cursor is None and core.archive.sessions.last_extract_at(A, "s1") is None and core.read(A) == []
    scripted_llm.push(remember_tokens)
    retried = done(core, core.ingest(A, "s1", turns(3, text="token-{i}")))  # the retry covers the old turns
    assert retried.status == "done" and retried.counts["events"] == 3
    assert retried.cursor == T0 + timedelta(minutes=2)
    assert len(core.read(A)) == 3


def test_extractor_timeout_fails_and_keeps_the_cursor(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url), job_timeout_s=0.5)
    scripted_llm.push(Reply(tool_calls=(tool_call("memory_add", {"memory": "too late"}),), delay=2.0))
    failed = done(core, core.ingest(A, "s1", turns(2)))
    assert failed.status == "failed" and "timed out" in (failed.reason or "") and failed.reason_code == "timeout"
    assert failed.cursor is None and core.read(A) == []
    time.sleep(1.6)  # the late answer arrives and changes nothing
    assert core.read(A) == [] and core.archive.sessions.last_extract_at(A, "s1") is None


class _SlowExtractor(ExtractorWrapper):
    """The verbatim extractor, ``seconds`` late (its capabilities forwarded by the wrapper base)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(VerbatimExtractor())
        self.seconds = seconds
        self.calls = 0

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        self.calls += 1
        time.sleep(self.seconds)
        return extract()


def test_job_deadline_bounds_any_extractor(make_core: MakeCore) -> None:
    slow = _SlowExtractor(1.5)
    core = make_core(extractor_obj=slow, job_timeout_s=0.3)
    t0 = time.monotonic()
    failed = done(core, core.ingest(A, "s1", turns(2)))
    assert time.monotonic() - t0 < 1.2  # the job did not wait for the extractor
    assert failed.status == "failed" and "timed out after 0.3 s" in (failed.reason or "")
    assert failed.cursor is None
    time.sleep(1.5)  # the abandoned extraction finishes and writes nothing
    assert core.read(A) == [] and core.archive.sessions.last_extract_at(A, "s1") is None
    slow.seconds = 0.0
    assert done(core, core.ingest(A, "s1", turns(2))).status == "done"
    assert len(core.read(A)) == 2
    assert core.jobs.policy == "append_only"  # the wrapped extractor's own policy


def test_garbage_tool_calls_are_rejected_one_by_one(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url))
    scripted_llm.push([
        tool_call("memory_add", "{not json"),
        tool_call("memory_teleport", {"memory": "x"}),
        tool_call("memory_update", {"memory_id": 42, "memory": "no such memory"}),
        tool_call("memory_add", {"memory": "The user drinks green tea every morning"}),
    ])
    job = done(core, core.ingest(A, "s1", turns(2)))
    assert job.status == "done" and job.counts["applied"] == 1 and job.counts["rejected"] == 3
    assert len([e for e in job.errors if e.startswith("rejected")]) == 3
    assert any("not valid JSON" in e for e in job.errors) and any("memory_teleport" in e for e in job.errors)
    assert job.cursor == T0 + timedelta(minutes=1)  # extraction completed: the cursor moves
    assert [e.text for e in core.read(A)] == ["The user drinks green tea every morning"]


def test_unreadable_model_answer_fails_the_job(make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url))
    scripted_llm.push(Reply(status=200, body=b"<html>this is not an API</html>"))
    job = done(core, core.ingest(A, "s1", turns(2)))
    assert job.status == "failed" and job.cursor is None and core.read(A) == []


class _FlakyVectors:
    """Passes everything through but fails the n-th upsert."""

    def __init__(self, inner: Any, fail_on: int) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.upserts = 0

    def upsert(self, entries: Any, vectors: Any) -> None:
        self.upserts += 1
        if self.upserts == self.fail_on:
            raise OSError("disk full (injected)")
        self.inner.upsert(entries, vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Counts:
    """A recorder that keeps the counters (name, labels, value)."""

    def __init__(self) -> None:
        self.counts: list[tuple[str, dict[str, str], float]] = []

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        self.counts.append((name, labels, value))

    def observe(self, name: str, value: float, **labels: str) -> None:
        return None

    def gauge(self, name: str, value: float, **labels: str) -> None:
        return None


def test_store_failing_one_op_of_five(make_core: MakeCore) -> None:
    from memcore import telemetry

    core = make_core()
    core.service.vectors = _FlakyVectors(core.service.vectors, fail_on=3)  # type: ignore[assignment]
    rec = _Counts()
    telemetry.set_recorder(rec)
    try:
        job = done(core, core.ingest(A, "s1", turns(5)))
        # the job's counters follow its finished record (the worker counts them after the record is
        # written), so wait for them before the recorder goes
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
                name == "memcluster_operations_failed_total" for name, _, _ in list(rec.counts)):
            time.sleep(0.01)
    finally:
        telemetry.set_recorder(None)
    # a partly failed job is not "done": it is partial, finished, and says which operation failed
    assert job.status == "partial" and job.finished and job.reason_code == "operations_failed"
    assert job.reason == "1 of 5 operations failed (see operations)"
    assert [(r.index, r.type) for r in job.failed_operations] == [(2, "add")]
    failed = [(labels, v) for name, labels, v in rec.counts if name == "memcluster_operations_failed_total"]
    assert failed == [({"op": "add", "app": A.app, "shard": str(core.shard)}, 1.0)]
    writes = [labels["op"] for name, labels, _ in rec.counts if name == "memcluster_writes_total"
              and labels.get("source") == "extraction"]
    assert writes == ["add"] * 4  # the applied ones are still counted as writes
    assert ("memcluster_jobs_total", {"status": "partial", "reason": "operations_failed", "app": A.app,
                                      "shard": str(core.shard)}, 1.0) in rec.counts
    assert [o["status"] for o in job.operations] == ["applied", "applied", "failed", "applied", "applied"]
    assert job.counts["applied"] == 4 and job.counts["failed"] == 1
    assert len(job.errors) == 1 and job.errors[0].startswith("operation 2 (add): StoreError")
    assert "disk full" in job.errors[0]
    assert job.cursor == T0 + timedelta(minutes=4)  # per-op failures do not hold the cursor
    assert provenance(core) == [["s1/e0"], ["s1/e1"], ["s1/e3"], ["s1/e4"]]


# ------------------------------------------------------------------ restart
def test_restart_requeues_unfinished_jobs(make_core: MakeCore, tmp_path: Path) -> None:
    data = tmp_path / "restart"
    core = make_core(start_workers=False, data=data)
    jobs = [core.ingest(A, "s1", turns(2)), core.ingest(B, "s1", turns(2)),
            core.ingest(A, "s2", turns(3, prefix="x", text="second session, turn {i}"))]
    core.archive.jobs.start(jobs[0].job_id)  # it was running when the shard died
    assert [core.job(j.job_id).status for j in jobs] == ["running", "queued", "queued"]
    core.close()
    reopened = make_core(data=data)
    assert reopened.jobs.recovered == 3
    final = [done(reopened, j) for j in jobs]
    assert [j.status for j in final] == ["done"] * 3
    assert [j.attempts for j in final] == [2, 1, 1]
    assert provenance(reopened, A) == [["s1/e0"], ["s1/e1"], ["s2/x0"], ["s2/x1"], ["s2/x2"]]
    assert len(reopened.read(B)) == 2
    assert reopened.status()["extraction"]["recovered_on_start"] == 3


# ------------------------------------------------------------------ recall and settings
def test_recall_excludes_the_current_session_and_other_users(make_core: MakeCore) -> None:
    core = make_core()
    core.ingest(A, "trip", turns(2, text="we booked the ferry to Naxos, turn {i}"))
    core.ingest(A, "now", turns(2, text="which ferry did we book? turn {i}", prefix="n"))
    core.ingest(B, "bob", turns(2, text="bob's ferry to Crete {i}", prefix="b"))
    hits = core.recall(A, "ferry Naxos", "now", 10)
    assert {h.session for h in hits} == {"trip"} and hits[0].content.startswith("we booked")
    assert {h.session for h in core.recall(A, "ferry", None, 10)} == {"trip", "now"}
    with pytest.raises(ValidationError):
        core.recall(A, "ferry", None, 0)


def test_extractor_from_settings(make_core: MakeCore, scripted_llm: ScriptedLLM, tmp_path: Path) -> None:
    verbatim = make_core(data=tmp_path / "v", granularity="round", policy="preserve_history")
    assert verbatim.jobs.status()["extractor"] == "VerbatimExtractor"
    assert verbatim.jobs.policy == "append_only" and verbatim.jobs.episodes is None
    assert done(verbatim, verbatim.ingest(A, "s", turns(4))).counts["applied"] == 2  # rounds
    llm = make_core(data=tmp_path / "l", **extractor_settings(scripted_llm.base_url), policy="preserve_history",
                    assistant_episodes=True)
    assert llm.jobs.status()["extractor"] == "LLMExtractor" and llm.jobs.policy == "preserve_history"
    assert llm.jobs.episodes is not None
    assert llm.settings.policy(A.app).enabled_tools() == {"memory_add", "memory_update", "memory_delete",
                                                           "memory_search"}
