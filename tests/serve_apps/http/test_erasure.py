"""Erasure routes over real HTTP (uvicorn + LocalShardBackend, verbatim extraction) when sessions number
their messages alike: an event id is unique within its session only, so provenance cites
``<session>/<event_id>`` and every delete follows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.auto_memory import turns
from tests.serve_apps.conftest import Served
from tests.serve_apps.http.test_ingest import events_url, wait_job

USER = "/v1/apps/app/users/ann"


def byte_scan(root: Path, marker: str) -> list[str]:
    needle = marker.encode()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def ingest_two_sessions(c: httpx.Client, marker: str) -> dict[str, str]:
    """s1/e0 holds the marker, s2/e0 does not; returns memory id by session."""
    for session, text in (("s1", f"my locker code is {marker}"), ("s2", "I water the plants on Sundays")):
        r = c.post(events_url("app", "ann", session), json={"events": turns(1, text=text)})
        assert r.status_code in (200, 202), r.text
        assert wait_job(c, r.json()["job_id"])["status"] == "done"
    entries = c.get(f"{USER}/memories").json()["entries"]
    assert len(entries) == 2
    return {("s1" if marker in e["text"] else "s2"): e["id"] for e in entries}


def recall(c: httpx.Client, query: str) -> list[tuple[str, str]]:
    r = c.post(f"{USER}/sessions/recall", json={"query": query})
    assert r.status_code == 200, r.text
    return [(h["session"], h["event_id"]) for h in r.json()["hits"]]


def test_a_hard_delete_takes_its_turn_though_another_session_has_the_same_event_id(
        make_server: Callable[..., Served]) -> None:
    marker = "zqxlockermarker"
    served = make_server(shards=1)
    assert served.settings is not None
    with served.client() as c:
        ids = ingest_two_sessions(c, marker)
        assert c.delete(f"{USER}/memories/{ids['s1']}", params={"hard": True}).status_code == 204
        assert recall(c, marker) == []
        assert recall(c, "plants Sundays") == [("s2", "e0")]
        assert c.post("/v1/admin/compact").status_code == 200
    assert byte_scan(Path(served.settings.data_dir), marker) == []


def test_deleting_a_turn_leaves_the_memories_of_the_other_sessions_turn(make_server: Callable[..., Served]) -> None:
    with make_server(shards=1).client() as c:
        ids = ingest_two_sessions(c, "zqxturnmarker")
        r = c.delete(f"{USER}/sessions/s1/events/e0")
        assert r.status_code == 200 and r.json() == {"session": "s1", "events": 1, "entries": 1}, r.text
        kept = c.get(f"{USER}/memories").json()["entries"]
        assert [e["id"] for e in kept] == [ids["s2"]] and kept[0]["provenance"] == ["s2/e0"]
