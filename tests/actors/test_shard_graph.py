"""The knowledge graph in a shard: the extraction job writes the scripted model's fact operations into the
user's graph in its FIFO (recorded on the job); a hard delete of the turns they came from erases them; the
app's TTL expires facts and diary entries."""

from __future__ import annotations

import time
from datetime import timedelta

from memcore.model import UserKey
from testkit.scripted_llm import ScriptedLLM, tool_call
from tests.actors.conftest import MakeCore, done
from tests.auto_memory import T0, extractor_settings

A = UserKey(app="app", user="alice")


def said(i: int, text: str, days: int = 0) -> list[dict[str, str]]:
    return [{"id": f"e{i}", "role": "user", "content": text, "timestamp": (T0 + timedelta(days=days)).isoformat()}]


def test_the_job_writes_fact_operations_and_erasing_the_turns_erases_them(make_core: MakeCore,
                                                                          scripted_llm: ScriptedLLM) -> None:
    core = make_core(**extractor_settings(scripted_llm.base_url, graph=True))
    scripted_llm.push(lambda req: [tool_call("fact_add", {"subject": "User", "predicate": "lives_in",
                                                          "object": "Paris"})],
                      lambda req: [tool_call("fact_supersede", {"subject": "User", "predicate": "lives_in",
                                                                "object": "Lisbon"}),
                                   tool_call("fact_add", {"subject": "", "predicate": "x", "object": "y"})])
    first = done(core, core.ingest(A, "s1", said(1, "I live in Paris")))
    assert first.status == "done" and first.counts["facts_applied"] == 1, first
    second = done(core, core.ingest(A, "s2", said(1, "I moved to Lisbon", days=7)))
    assert second.counts["facts"] == 2 and second.counts["facts_failed"] == 1
    assert any(e.startswith("fact operation 2 (add)") for e in second.errors), second.errors
    got = core.graph_query(A, {"entity": "user", "predicate": "lives_in"})["facts"]
    assert [(f["object"], f["current"], f["turns"]) for f in got] == [("Paris", False, ["s1/e1"]),
                                                                      ("Lisbon", True, ["s2/e1"])]
    core.drop_turns(A, "s2")  # Lisbon came from s2/e1 only; Paris's closed version cites s1/e1
    left = core.graph_query(A, {"entity": "user"})["facts"]
    assert [(f["object"], f["current"], f["ended_by"]) for f in left] == [("Paris", True, None)]  # open again


def test_the_apps_ttl_expires_facts_and_diary_entries(make_core: MakeCore) -> None:
    core = make_core(settings={"ttl": {"apps": {"app": 3600.0}}}, start_workers=False)
    core.graph_add(A, {"subject": "Ann", "predicate": "likes", "object": "tea"})
    core.diary_write(A, {"agent": "a", "text": "note"})
    other = UserKey(app="keep", user="alice")
    core.graph_add(other, {"subject": "Ann", "predicate": "likes", "object": "tea"})
    assert core.maintenance.expire_events(time.time() + 60) == 0  # within the lifetime
    assert core.maintenance.expire_events(time.time() + 7200) == 2  # the fact's one version, the diary entry
    assert core.graph_query(A, {"entity": "Ann"})["facts"] == [] and core.diary_read(A, {"agent": "a"})["total"] == 0
    assert len(core.graph_query(other, {"entity": "Ann"})["facts"]) == 1  # an app without a TTL keeps its graph


def test_a_reextraction_writes_its_facts_when_reads_switch_and_an_aborted_one_writes_none(
        make_core: MakeCore, scripted_llm: ScriptedLLM) -> None:
    core = make_core(start_workers=False)
    core.backfill(A, [("s1", said(1, "I live in Paris")), ("s2", said(1, "I moved to Lisbon", days=7))], [], None)
    extractor = extractor_settings(scripted_llm.base_url, graph=True)
    scripted_llm.push(lambda req: [tool_call("fact_add", {"subject": "User", "predicate": "lives_in",
                                                          "object": "Paris"})],
                      lambda req: [tool_call("fact_supersede", {"subject": "User", "predicate": "lives_in",
                                                                "object": "Lisbon"})])
    core.begin_generation(2, ["app"], [])
    report = core.reextract_user(2, A, extractor)
    assert report["sessions"] == 2 and report["facts"] == 2
    assert core.graph_query(A, {"entity": "user"})["facts"] == []  # held back until the switch
    switched = core.switch_generation(2)
    assert (switched["facts_applied"], switched["facts_failed"]) == (2, 0)
    got = core.graph_query(A, {"entity": "user", "predicate": "lives_in"})["facts"]
    assert [(f["object"], f["current"], f["turns"]) for f in got] == [("Paris", False, ["s1/e1"]),
                                                                      ("Lisbon", True, ["s2/e1"])]
    # a run that is aborted leaves the graph as it was
    scripted_llm.push(lambda req: [tool_call("fact_add", {"subject": "User", "predicate": "likes", "object": "tea"})],
                      lambda req: [])
    core.begin_generation(3, ["app"], [])
    assert core.reextract_user(3, A, extractor)["facts"] == 1
    core.abort_generation(3)
    assert [f["object"] for f in core.graph_query(A, {"entity": "user"})["facts"]] == ["Paris", "Lisbon"]
    # a fact held for a turn that is deleted during the build is not written at the switch
    scripted_llm.push(lambda req: [tool_call("fact_add", {"subject": "User", "predicate": "owns", "object": "a bike"})],
                      lambda req: [])
    core.begin_generation(4, ["app"], [])
    assert core.reextract_user(4, A, extractor)["facts"] == 1
    core.drop_turns(A, "s1")
    assert core.switch_generation(4)["facts_applied"] == 0
    assert core.graph_query(A, {"entity": "user", "predicate": "owns"})["facts"] == []


def test_facts_and_diary_entries_past_the_apps_lifetime_are_gone_from_reads_before_the_sweep(
        make_core: MakeCore) -> None:
    core = make_core(settings={"ttl": {"apps": {"app": 0.3}}}, start_workers=False)
    other = UserKey(app="keep", user="alice")
    for key in (A, other):
        core.graph_add(key, {"subject": "Ann", "predicate": "likes", "object": "tea"})
        core.diary_write(key, {"agent": "a", "text": "note"})
    assert len(core.graph_query(A, {"entity": "Ann"})["facts"]) == 1
    time.sleep(0.4)
    assert core.graph_query(A, {"entity": "Ann"})["facts"] == []
    assert core.graph_timeline(A, {"entity": "Ann"})["timeline"] == []
    assert core.diary_read(A, {"agent": "a"})["total"] == 0
    exported = core.graph_export(A)
    assert exported.facts == [] and exported.diary == []
    assert len(core.graph_query(other, {"entity": "Ann"})["facts"]) == 1  # an app without a TTL keeps its graph
    assert core.diary_read(other, {"agent": "a"})["total"] == 1
    assert core.maintenance.expire_events() == 2  # then the sweep deletes the fact's version and the entry
