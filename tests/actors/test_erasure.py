"""Erasure on one shard (real Qdrant Edge, Tantivy and SQLite on temp dirs): forget a user, delete and
clear with their archived sources, soft-deleted turns hidden from recall and re-extraction, deletions
during a re-extraction, compaction (a byte scan of the data directory), crash recovery of a compaction,
TTL of archived turns, and the archive's migration to the ``hidden`` column."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from actors.shard import ShardCore
from memcore.errors import NotFoundError
from memcore.layout import ShardLayout
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.stores.edge_compaction import OLD_SUFFIX, compact_dir, recover_compaction
from memcore.stores.qdrant_edge import QdrantEdgeStore
from memcore.stores.sqlite_archive import SqliteArchive

ANN = UserKey(app="app", user="ann")
BOB = UserKey(app="app", user="bob")
T0 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
VERBATIM = {"granularity": "session"}


def turns(prefix: str, texts: list[str], start: datetime = T0) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "role": "user", "content": t,
             "timestamp": (start + timedelta(minutes=i)).isoformat()} for i, t in enumerate(texts)]


def files_containing(root: Path, marker: str) -> list[str]:
    needle = marker.encode()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes().lower())


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64})


@pytest.fixture
def core(settings: Settings, hashing_embedder: Any) -> Any:
    c = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    yield c
    c.close()


def plant(core: ShardCore, key: UserKey, marker: str) -> None:
    """The marker in an archived turn with an entry made from it, another turn shared with a kept entry,
    and an API-added entry carrying the marker."""
    s1 = turns("s1", [f"my secret word is {marker}", "I live in Porto"])
    core.backfill(key, [("s1", s1)], [
        {"text": f"User: my secret word is {marker}", "provenance": ["s1-0", "s1-1"]},
        {"text": "User lives in Porto", "provenance": ["s1-1"]},
    ], None)
    core.add(key, {"text": f"The code name is {marker}"})


def visible_anywhere(core: ShardCore, key: UserKey, marker: str) -> list[str]:
    found = [f"read:{e.id}" for e in core.read(key) if marker in e.text]
    found += [f"search:{h.entry.id}" for h in core.search(key, {"query": marker}) if marker in h.entry.text]
    found += [f"recall:{h.event_id}" for h in core.recall(key, marker) if marker in h.content]
    found += [f"preload:{e.id}" for e in core.preload(key, -1, marker, "system", None).entries if marker in e.text]
    found += [f"archive:{e.id}" for e in core.archive.events.read(key) if marker in e.content]
    return found


def test_forget_erases_the_user_everywhere_and_compaction_leaves_no_byte(
        core: ShardCore, settings: Settings) -> None:
    marker = "zqxforgetmarker"
    plant(core, ANN, marker)
    core.add(BOB, {"text": "Bob plays chess"})
    core.delete(ANN, core.read(ANN)[0].id)  # a tombstone is erased too
    assert files_containing(Path(settings.data_dir), marker)  # it is on disk before
    counts = core.forget(ANN).value
    assert counts["entries"] == 3 and counts["events"] == 2 and counts["sessions"] == 1
    assert visible_anywhere(core, ANN, marker) == []
    assert core.export(ANN) == [] and core.archive.sessions.users() == []
    assert [e.text for e in core.read(BOB)] == ["Bob plays chess"]
    assert ShardLayout(settings, 0).compact_marker.exists()
    result = core.compact()
    assert result["vectors_rebuilt"] and result["points"] == 1
    assert not ShardLayout(settings, 0).compact_marker.exists()
    assert files_containing(Path(settings.data_dir), marker) == []
    assert [h.entry.text for h in core.search(BOB, {"query": "chess"})] == ["Bob plays chess"]  # still serves
    core.add(BOB, {"text": "Bob joined a club"})  # and writes
    assert core.forget(ANN).value["entries"] == 0  # idempotent


def test_hard_delete_removes_the_turns_only_it_came_from(core: ShardCore, settings: Settings) -> None:
    marker = "zqxharddeletemarker"
    plant(core, ANN, marker)
    secret = next(e for e in core.read(ANN) if "secret" in e.text)
    core.delete(ANN, secret.id, hard=True)
    kept = {e.id: e.content for e in core.archive.events.read(ANN)}
    assert kept == {"s1-1": "I live in Porto"}  # the shared turn feeds a live memory: it stays
    assert [h.event_id for h in core.recall(ANN, "Porto")] == ["s1-1"]
    code = next(e for e in core.read(ANN) if "code name" in e.text)
    core.delete(ANN, code.id, hard=True)
    assert visible_anywhere(core, ANN, marker) == []
    core.compact()
    assert files_containing(Path(settings.data_dir), marker) == []


def test_purge_sources_removes_shared_turns_too(core: ShardCore) -> None:
    plant(core, ANN, "zqxpurgemarker")
    secret = next(e for e in core.read(ANN) if "secret" in e.text)
    core.delete(ANN, secret.id, hard=True, purge_sources=True)
    assert core.archive.events.read(ANN) == []
    assert {e.text for e in core.read(ANN)} >= {"User lives in Porto"}  # the other memory stays


def test_clear_removes_the_sources_and_purge_every_turn(core: ShardCore, settings: Settings) -> None:
    marker = "zqxclearmarker"
    plant(core, ANN, marker)
    core.backfill(ANN, [("s2", turns("s2", [f"small talk {marker}"], T0 + timedelta(days=1)))], [], None)
    assert core.clear(ANN, hard=True).value == 3
    assert [e.content for e in core.archive.events.read(ANN)] == [f"small talk {marker}"]  # no memory came from it
    core.clear(ANN, hard=True, purge_sources=True)
    assert visible_anywhere(core, ANN, marker) == []
    core.compact()
    assert files_containing(Path(settings.data_dir), marker) == []


def test_soft_delete_hides_the_turns_from_recall_and_reextraction(core: ShardCore) -> None:
    marker = "zqxsoftmarker"
    plant(core, ANN, marker)
    secret = next(e for e in core.read(ANN) if "secret" in e.text)
    core.delete(ANN, secret.id)
    assert core.recall(ANN, marker) == []
    assert [h.event_id for h in core.recall(ANN, "Porto")] == ["s1-1"]
    core.clear(ANN)  # soft: every source turn hidden
    assert core.recall(ANN, "Porto") == []
    core.begin_generation(2, ["app"], [])
    report = core.reextract_user(2, ANN, VERBATIM)
    assert report["events"] == 0
    core.switch_generation(2)
    assert visible_anywhere(core, ANN, marker) == [] and core.read(ANN) == []


def test_a_deletion_during_a_reextraction_is_not_undone_by_the_switch(core: ShardCore, settings: Settings) -> None:
    marker = "zqxduringmarker"
    plant(core, ANN, marker)
    core.begin_generation(2, ["app"], [])
    core.reextract_user(2, ANN, VERBATIM)  # the replay already read the marker turn
    secret = next(e for e in core.read(ANN) if "secret" in e.text)
    core.delete(ANN, secret.id, hard=True)
    code = next(e for e in core.read(ANN) if "code name" in e.text)
    core.delete(ANN, code.id, hard=True)
    core.switch_generation(2)
    assert visible_anywhere(core, ANN, marker) == []
    assert core.generation_info()["generations"] == [1, 2]  # generation 1 is retired, still on disk
    core.compact()
    assert files_containing(Path(settings.data_dir), marker) == []


def test_forget_during_a_reextraction(core: ShardCore) -> None:
    marker = "zqxforgetduring"
    plant(core, ANN, marker)
    core.begin_generation(2, ["app"], [])
    core.reextract_user(2, ANN, VERBATIM)
    core.forget(ANN)
    core.switch_generation(2)
    assert visible_anywhere(core, ANN, marker) == [] and core.export(ANN) == []


def test_a_job_whose_turns_were_erased_writes_nothing(make_core: Any) -> None:
    core = make_core(start_workers=False)
    job = core.ingest(ANN, "s9", [{"id": "e1", "role": "user", "content": "zqxjobmarker is my pin"}])
    core.forget(ANN)
    with pytest.raises(NotFoundError):
        core.job(job.job_id)
    core.jobs.start()
    time.sleep(0.5)
    assert core.read(ANN) == [] and core.archive.events.read(ANN) == []


def test_ttl_expires_archived_turns(settings: Settings, hashing_embedder: Any) -> None:
    s = settings.model_copy(update={"ttl": settings.ttl.model_copy(update={"apps": {"app": 3600.0}})})
    core = ShardCore(s, 0, hashing_embedder, start_workers=False)
    try:
        now = datetime.now(UTC)
        core.backfill(ANN, [("old", turns("old", ["zqxoldturn"], now - timedelta(hours=2))),
                            ("new", turns("new", ["a recent turn"], now - timedelta(minutes=5)))], [], None)
        core.backfill(UserKey(app="keep", user="ann"),
                      [("old", turns("old", ["no ttl for this app"], now - timedelta(days=9)))], [], None)
        done = core.maintenance.run_once()
        assert done["expired_events"] == 1 and done["compacted"]
        assert [e.content for e in core.archive.events.read(ANN)] == ["a recent turn"]
        assert core.recall(ANN, "zqxoldturn") == []
        assert len(core.archive.events.read(UserKey(app="keep", user="ann"))) == 1
        assert files_containing(Path(s.data_dir), "zqxoldturn") == []
    finally:
        core.close()


def test_a_compaction_interrupted_between_its_renames_is_repaired(tmp_path: Path, hashing_embedder: Any) -> None:
    from memcore.model import Entry

    path = tmp_path / "vectors"
    entry = Entry(id="a" * 64, app="app", user="ann", text="kept", created_at=T0, updated_at=T0)
    with QdrantEdgeStore(path, hashing_embedder.dim) as store:
        store.upsert([entry], hashing_embedder.embed_passages(["kept"]))
    assert compact_dir(path, hashing_embedder.dim) == 1
    path.rename(path.with_name(path.name + OLD_SUFFIX))  # as if killed after the first rename
    recover_compaction(path)
    with QdrantEdgeStore(path, hashing_embedder.dim) as store:
        assert [e.text for e in store.scroll()] == ["kept"]


def test_an_archive_without_the_hidden_column_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE events (app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL, id TEXT NOT NULL,"
        " role TEXT NOT NULL, content TEXT NOT NULL, ts_us INTEGER NOT NULL, external_context INTEGER NOT NULL"
        " DEFAULT 0, seq INTEGER, extracted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (app, user, session, id));"
        " INSERT INTO events VALUES ('app', 'ann', 's', 'e1', 'user', 'hello', 1, 0, 1, 1);")
    db.close()
    archive = SqliteArchive(path, tmp_path / "seq.sqlite3")
    try:
        assert [e.content for e in archive.events.read(ANN)] == ["hello"]
        assert archive.events.visible(ANN, "s", ["e1"]) == {"e1"}
    finally:
        archive.close()


def test_server_mode_compaction_rebuilds_keywords_and_archive(tmp_path: Path, hashing_embedder: Any) -> None:
    """With the Qdrant server backend the server vacuums its own segments; the shard rewrites what it keeps
    on its disk (keyword index, archive), and forget removes the user's points from the shared collection."""
    from qdrant_client import QdrantClient

    from memcore import factory

    url = "http://erasure-test-qdrant:6333"
    client = QdrantClient(":memory:")
    factory.share_qdrant_client(url, client)
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64},
                        vector_store={"backend": "server", "url": url, "collection": "erasure"})
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        marker = "zqxservermarker"
        plant(core, ANN, marker)
        core.add(BOB, {"text": "Bob plays chess"})
        assert core.forget(ANN).value["entries"] == 3
        result = core.compact()
        assert result["vectors_rebuilt"] is False and result["generations"] == [1]
        assert visible_anywhere(core, ANN, marker) == []
        assert files_containing(tmp_path, marker) == []
        assert [h.entry.text for h in core.search(BOB, {"query": "chess"})] == ["Bob plays chess"]
    finally:
        core.close()
        factory.share_qdrant_client(url, None)
        client.close()


def test_deletes_racing_a_switch_and_a_compaction_finish(core: ShardCore) -> None:
    """A delete holds the user's write turn and then reaches the other generations; a switch and a
    compaction hold the generation lock and wait for the writes gate: neither may wait for the other."""
    import threading

    core.add_many(ANN, [{"text": f"fact number {i}"} for i in range(60)])
    core.begin_generation(2, ["app"], [])
    ids = [e.id for e in core.read(ANN)]
    errors: list[BaseException] = []

    def deleter() -> None:
        try:
            for entry_id in ids:
                core.delete(ANN, entry_id, hard=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def switcher() -> None:
        try:
            core.switch_generation(2)
            core.compact()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=deleter, daemon=True), threading.Thread(target=switcher, daemon=True)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not any(w.is_alive() for w in workers), "deadlock"
    assert errors == []
    assert core.read(ANN) == []


def test_the_maintenance_sweep_compacts_after_an_erasure_once(core: ShardCore, settings: Settings) -> None:
    marker = "zqxsweepmarker"
    plant(core, ANN, marker)
    assert core.maintenance.run_once()["compacted"] is False  # nothing erased: no compaction
    core.forget(ANN)
    assert files_containing(Path(settings.data_dir), marker)
    assert core.maintenance.run_once()["compacted"] is True
    assert files_containing(Path(settings.data_dir), marker) == []
    assert core.maintenance.run_once()["compacted"] is False


def test_an_agents_memory_delete_takes_its_source_turns_like_the_http_delete(tmp_path: Path,
                                                                            hashing_embedder: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64},
                        tools={"enabled": {"memory_delete": True, "memory_clear": True}})
    core = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        plant(core, ANN, "zqxtoolmarker")
        entry = next(e for e in core.read(ANN) if e.text.startswith("User: my secret"))
        assert core.tool(ANN, "memory_delete", {"memory_id": entry.id}).value == {"status": "ok",
                                                                                  "memory_id": entry.id}
        assert [h.event_id for h in core.recall(ANN, "zqxtoolmarker")] == []  # its own turn is hidden
        assert [h.event_id for h in core.recall(ANN, "Porto")] == ["s1-1"]  # a turn a live entry came from stays
        assert core.tool(ANN, "memory_clear", {}).value["cleared"] >= 1
        assert core.recall(ANN, "Porto") == [] and core.read(ANN) == []
    finally:
        core.close()


def test_a_pending_job_never_extracts_a_removed_turn(make_core: Any) -> None:
    core = make_core(start_workers=False)
    job = core.ingest(ANN, "s7", [{"id": "e1", "role": "user", "content": "zqxpopped is my locker"},
                                  {"id": "e2", "role": "user", "content": "zqxkept is my bike"}])
    dropped = core.drop_turns(ANN, "s7", ["e1"]).value
    assert dropped == {"session": "s7", "events": 1, "entries": 0}
    core.jobs.start()
    for _ in range(100):
        if core.job(job.job_id).status in ("done", "failed", "skipped"):
            break
        time.sleep(0.05)
    texts = [e.text for e in core.read(ANN)]
    assert any("zqxkept" in t for t in texts) and not any("zqxpopped" in t for t in texts)
    assert [e.id for e in core.archive.events.read(ANN)] == ["e2"]
    assert core.drop_turns(ANN, "s7").value == {"session": "s7", "events": 1, "entries": 1}
    assert core.read(ANN) == [] and core.archive.events.read(ANN) == []


# ------------------------------------------------------------------ event ids across sessions
def two_sessions_reusing_e1(core: ShardCore, marker: str) -> None:
    """Two sessions that number their messages from e1 (as docs/archive-format.md's example does), each
    extracted (verbatim, one memory per turn)."""
    from tests.actors.conftest import done

    done(core, core.ingest(ANN, "s1", [{"id": "e1", "role": "user", "content": f"my pin is {marker}"}]))
    done(core, core.ingest(ANN, "s2", [{"id": "e1", "role": "user", "content": "I like green tea"}]))


def test_a_hard_delete_removes_its_turn_though_another_session_reuses_the_event_id(
        make_core: Any, tmp_path: Path) -> None:
    marker = "zqxreusedid"
    core = make_core()
    two_sessions_reusing_e1(core, marker)
    secret = next(e for e in core.read(ANN) if marker in e.text)
    core.delete(ANN, secret.id, hard=True)
    assert core.recall(ANN, marker) == []
    assert [e.content for e in core.archive.events.read(ANN)] == ["I like green tea"]
    assert [e.text for e in core.read(ANN)] == ["User: I like green tea"]
    core.compact()
    assert files_containing(tmp_path, marker) == []


def test_deleting_a_turn_keeps_the_memories_of_another_sessions_turn_with_the_same_id(make_core: Any) -> None:
    core = make_core()
    two_sessions_reusing_e1(core, "zqxdropturn")
    assert core.drop_turns(ANN, "s1", ["e1"]).value == {"session": "s1", "events": 1, "entries": 1}
    assert [e.text for e in core.read(ANN)] == ["User: I like green tea"]
    assert [h.session for h in core.recall(ANN, "green tea")] == ["s2"]


def test_a_reextraction_keeps_a_live_memory_of_a_reused_event_id(make_core: Any) -> None:
    """The replay covered s1/e1; a turn s2/e1 extracted live during the build is not "covered" by it."""
    from tests.actors.conftest import done

    core = make_core()
    done(core, core.ingest(ANN, "s1", [{"id": "e1", "role": "user", "content": "I play the cello"}]))
    core.begin_generation(2, ["app"], [])
    core.reextract_user(2, ANN, {"granularity": "turn"})
    done(core, core.ingest(ANN, "s2", [{"id": "e1", "role": "user", "content": "I moved to Lisbon"}]))
    core.switch_generation(2)
    assert sorted(e.text for e in core.read(ANN)) == ["User: I moved to Lisbon", "User: I play the cello"]


def test_bare_refs_written_before_sessions_were_cited_still_erase(core: ShardCore, settings: Settings) -> None:
    """Entries and archives written with bare event ids keep working; an id two sessions share is
    ambiguous: erasure removes every turn it may name unless another memory names that turn for certain,
    and keeps every memory that may still have a visible source (memcore.provenance)."""
    marker = "zqxbarerefs"
    core.backfill(ANN, [("s1", [{"id": "e1", "role": "user", "content": f"my pin is {marker}",
                                 "timestamp": T0.isoformat()}]),
                        ("s2", [{"id": "e1", "role": "user", "content": "I like green tea",
                                 "timestamp": (T0 + timedelta(days=1)).isoformat()}])],
                  [{"text": f"User: my pin is {marker}", "provenance": ["e1"]},
                   {"text": "User: I like green tea", "provenance": ["e1"]}], None)
    assert core.drop_turns(ANN, "s1", ["e1"]).value["entries"] == 0  # each may still come from s2/e1
    assert len(core.read(ANN)) == 2
    secret = next(e for e in core.read(ANN) if marker in e.text)
    core.delete(ANN, secret.id, hard=True)
    assert visible_anywhere(core, ANN, marker) == [] and core.recall(ANN, "green tea") == []
    assert [e.text for e in core.read(ANN)] == ["User: I like green tea"]
    core.compact()
    assert files_containing(Path(settings.data_dir), marker) == []
