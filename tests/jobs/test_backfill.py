from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.backfill import BackfillOptions, Source, fit_cpus, run_backfill
from tests.jobs.conftest import session_row, write_jsonl

pytestmark = pytest.mark.ray

ARCHIVE = [
    session_row("shop", "ann", "s1", [("user", "I adopted a beagle named Biscuit last week"),
                                      ("assistant", "Congratulations on Biscuit!"),
                                      ("tool", "ignored tool output")], day=1),
    session_row("shop", "ann", "s2", [("user", "Biscuit chewed my running shoes"),
                                      ("assistant", "Puppies love shoes")], day=3),
    session_row("shop", "bob", "b1", [("user", "My favourite climbing gym is Boulder Barn"),
                                      ("assistant", "Nice, how often do you go?"),
                                      ("user", "Twice a week on Tuesdays and Fridays")], day=2),
]


def test_backfill_end_to_end_searchable_with_provenance_and_idempotent(make_cluster: Any, tmp_path: Path) -> None:
    cluster = make_cluster()
    path = write_jsonl(tmp_path / "archive.jsonl", ARCHIVE)
    logs: list[str] = []
    summary = run_backfill(cluster.settings, Source(paths=[str(path)]),
                           BackfillOptions(progress_s=0.5, granularity="turn"), log=logs.append)
    assert summary.ok, summary.failures
    assert (summary.sessions, summary.sessions_written, summary.users) == (3, 3, 2)
    assert summary.turns == 7 and summary.entries == 7 and summary.entries_new == 7
    assert logs[-1].startswith("backfill: 3/3 sessions")

    hits = cluster.search("shop", "ann", "beagle Biscuit")
    assert hits and hits[0].entry.provenance == ["s1/s1-0"]  # <session>/<event id>
    assert hits[0].entry.text == "User: I adopted a beagle named Biscuit last week"
    assert {e.provenance[0] for e in cluster.read("shop", "ann")} == {"s1/s1-0", "s1/s1-1", "s2/s2-0", "s2/s2-1"}
    assert not cluster.search("shop", "bob", "beagle Biscuit") or all(
        h.entry.user == "bob" for h in cluster.search("shop", "bob", "beagle Biscuit"))

    before = {(e.id, e.updated_at) for u in ("ann", "bob") for e in cluster.read("shop", u)}
    again = run_backfill(cluster.settings, Source(paths=[str(path)]), BackfillOptions(progress_s=0, granularity="turn"),
                         log=logs.append)
    assert again.ok and (again.sessions_written, again.turns, again.entries) == (3, 7, 7)
    assert again.entries_new == 0 and again.events_new == 0
    after = {(e.id, e.updated_at) for u in ("ann", "bob") for e in cluster.read("shop", u)}
    assert after == before  # no duplicates, nothing rewritten


def test_default_backfill_writes_windows_and_search_merges_them(make_cluster: Any, tmp_path: Path) -> None:
    cluster = make_cluster(shards=1)
    turns = [("user", "I adopted a beagle named Biscuit"), ("assistant", "What a lovely name!"),
             ("user", "He chews everything"), ("assistant", "Puppies do"), ("user", "Any tips for training?")]
    path = write_jsonl(tmp_path / "archive.jsonl", [session_row("shop", "ann", "s1", turns)])
    summary = run_backfill(cluster.settings, Source(paths=[str(path)]), BackfillOptions(progress_s=0), log=print)
    assert summary.ok and summary.turns == 5 and summary.entries == 5, summary.failures
    provenance = sorted(e.provenance for e in cluster.read("shop", "ann"))
    assert provenance == [["s1/s1-0", "s1/s1-1"], ["s1/s1-0", "s1/s1-1", "s1/s1-2"], ["s1/s1-1", "s1/s1-2", "s1/s1-3"],
                          ["s1/s1-2", "s1/s1-3", "s1/s1-4"], ["s1/s1-3", "s1/s1-4"]]  # one neighbour each side
    hits = cluster.search("shop", "ann", "beagle Biscuit chews")
    top = hits[0].entry  # overlapping windows come back merged: their turns once each, in session order
    assert hits[0].merged and {"s1/s1-0", "s1/s1-2"} <= set(top.provenance)
    assert top.provenance == sorted(top.provenance) and len(top.text.split("\n")) == len(top.provenance)
    assert top.text.startswith("User: I adopted a beagle named Biscuit\nAssistant: What a lovely name!")
    assert {t for h in hits for t in h.entry.provenance} == {f"s1/s1-{i}" for i in range(5)}


def test_bad_rows_are_reported_and_skipped_whole(make_cluster: Any, tmp_path: Path) -> None:
    cluster = make_cluster()
    good = session_row("shop", "cid", "ok", [("user", "I live in Lisbon near the river")])
    bad_event = session_row("shop", "cid", "bad", [("user", "My passport number is hidden"),
                                                    ("user", "second turn of the bad session")])
    bad_event["events"][1]["role"] = "robot"  # one invalid event rejects the whole session
    dup_ids = session_row("shop", "cid", "dup", [("user", "duplicate one"), ("user", "duplicate two")])
    dup_ids["events"][1]["id"] = dup_ids["events"][0]["id"]
    rows = [good, good, "{not json", {**good, "user": ""}, {**good, "sesion": "typo"}, bad_event, dup_ids,
            {**good, "session": "ts", "events": [{"id": "x", "role": "user", "content": "c", "timestamp": "soon"}]}]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    summary = run_backfill(cluster.settings, Source(paths=[str(path)]), BackfillOptions(progress_s=0), log=print)
    assert summary.error is None and summary.failed_sessions == 0
    assert (summary.sessions_written, summary.failed_rows) == (1, 6)  # a session given twice is written once
    errors = " | ".join(f["error"] for f in summary.failures)
    for needle in ("not valid JSON", "user", "unknown keys ['sesion']", "events.1.role", "duplicate event id",
                   "events.0.timestamp"):
        assert needle in errors
    assert [e.text for e in cluster.read("shop", "cid")] == ["User: I live in Lisbon near the river"]
    from memcore.model import UserKey

    key = UserKey(app="shop", user="cid")
    recall = cluster.ray.get(cluster.handle("shop", "cid").recall.remote(key, "passport duplicate", None, 10))
    assert recall == []  # nothing of a rejected session reached the archive


def test_parquet_input_and_live_ingest_after_backfill_only_extracts_the_delta(make_cluster: Any,
                                                                                tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cluster = make_cluster(shards=1)
    rows = [{**r, "events": [{**e, "tool_calls": None, "external_context": None} for e in r["events"]]}
            for r in ARCHIVE]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "archive.parquet")
    summary = run_backfill(cluster.settings, Source(paths=[f"file://{tmp_path / 'archive.parquet'}"]),
                           BackfillOptions(progress_s=0, granularity="turn"), log=print)
    assert summary.ok and summary.entries == 7, summary.failures

    from memcore.model import UserKey

    key = UserKey(app="shop", user="bob")
    events = [*ARCHIVE[2]["events"], {"id": "b1-9", "role": "user", "content": "I also started yoga",
                                      "timestamp": "2024-03-02T11:00:00Z"}]
    handle = cluster.handle("shop", "bob")
    job = cluster.ray.get(handle.ingest.remote(key, "b1", events))
    import time

    deadline = time.monotonic() + 30
    while not job.finished and time.monotonic() < deadline:
        time.sleep(0.1)
        job = cluster.ray.get(handle.job.remote(job.job_id))
    assert job.status == "done" and job.counts["events"] == 1
    texts = sorted(e.text for e in cluster.read("shop", "bob"))
    assert len(texts) == 4 and "User: I also started yoga" in texts


def test_llm_backfill_through_ray_data_llm(make_cluster: Any, tmp_path: Path, scripted_llm: Any) -> None:
    from testkit.scripted_llm import Reply, tool_call

    def answer(request: dict[str, Any]) -> Any:
        text = request["messages"][-1]["content"]
        if "running shoes" in text:
            return Reply(status=500, body={"error": {"message": "boom"}})
        return [tool_call("memory_add", {"memory": "The user talked about " + ("Biscuit" if "Biscuit" in text
                                                                                 else "climbing"),
                                         "memory_kind": "fact"})]

    scripted_llm.push(*[answer] * 3)
    cluster = make_cluster(extractor={"base_url": scripted_llm.base_url, "model": "scripted"})
    path = write_jsonl(tmp_path / "archive.jsonl", ARCHIVE)
    summary = run_backfill(cluster.settings, Source(paths=[str(path)]), BackfillOptions(progress_s=0), log=print)
    assert summary.error is None
    assert (summary.sessions_written, summary.failed_sessions) == (2, 1)
    assert "HTTP" in summary.failures[0]["error"] or "no choices" in summary.failures[0]["error"]
    ann = cluster.read("shop", "ann")
    assert [e.text for e in ann] == ["The user talked about Biscuit"]
    assert ann[0].provenance == ["s1/s1-0", "s1/s1-1"]
    assert len(scripted_llm.requests) == 3


@pytest.mark.parametrize(("free", "concurrency", "expected"), [
    (8.0, 2, 1.0),    # room enough: the request is kept
    (1.4, 1, 0.15),   # memctl up on 2 cores (Serve holds 0.6): 1.4 - 1 shuffle task - 0.25 light task
    (2.4, 2, 0.57),   # two embedders share what is left
    (0.8, 1, 0.05),   # no room at all: the smallest request (the job then waits for CPUs, it cannot help it)
])
def test_embedders_leave_room_for_the_group_by_tasks(free: float, concurrency: int, expected: float) -> None:
    """The embedding actors start first and hold their CPUs: a full CPU each on a small cluster left no
    room for the group-by's 1-CPU shuffle tasks, and `memctl backfill` waited forever."""
    logged: list[str] = []
    fitted = fit_cpus(BackfillOptions(concurrency=concurrency), free, logged.append)
    assert fitted.embed_cpus == expected
    assert bool(logged) == (expected != 1.0)
    if free - 1.25 > 0:
        assert fitted.embed_cpus * concurrency + 1.0 + fitted.task_cpus <= free + 1e-9
