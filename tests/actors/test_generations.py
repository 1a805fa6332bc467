from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from actors.shard import ShardCore
from memcore import factory
from memcore.errors import ValidationError
from memcore.layout import ShardLayout
from memcore.model import UserKey
from memcore.settings import Settings

ANN = UserKey(app="app", user="ann")
BOB = UserKey(app="other", user="bob")
T0 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
VERBATIM_SESSION = {"granularity": "session"}


def events(prefix: str, texts: list[str], start: datetime = T0) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": t,
             "timestamp": (start + timedelta(minutes=i)).isoformat()} for i, t in enumerate(texts)]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64})


@pytest.fixture
def core(settings: Settings, hashing_embedder: Any) -> Any:
    c = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    s1 = events("s1", ["I moved to Porto", "Nice city", "I work at a bakery"])
    s2 = events("s2", ["My sister is called Ines", "Noted"], T0 + timedelta(days=1))
    c.backfill(ANN, [("s1", s1), ("s2", s2)], [], None)  # archive + cursors only
    c.add_many(ANN, [{"text": "Ann prefers tea", "provenance": []}])
    c.add_many(ANN, [{"text": f"User: {e['content']}", "provenance": [e["id"]]} for e in s1 + s2])
    c.add_many(BOB, [{"text": "Bob likes chess"}])
    yield c
    c.close()


def texts(core: ShardCore, key: UserKey) -> set[str]:
    return {e.text for e in core.read(key)}


def test_reextract_builds_a_new_generation_and_switches(core: ShardCore, settings: Settings) -> None:
    old_ann, old_bob = texts(core, ANN), texts(core, BOB)
    assert len(old_ann) == 6
    begun = core.begin_generation(2, ["app"], [])
    assert begun["users"] == [["app", "ann"]] and begun["copied"] == 2  # bob's entry + ann's manual one
    report = core.reextract_user(2, ANN, VERBATIM_SESSION)
    assert (report["sessions"], report["events"], report["applied"]) == (2, 5, 2)
    assert texts(core, ANN) == old_ann  # reads stay on generation 1 until the switch
    core.add_many(BOB, [{"text": "Bob joined a club"}])  # a live write during the build
    switched = core.switch_generation(2)
    assert (switched["from"], switched["to"]) == (1, 2) and switched["caught_up"] >= 1  # idempotent re-copies
    new_ann = texts(core, ANN)
    assert "Ann prefers tea" in new_ann and len(new_ann) == 3
    assert "User: I moved to Porto\nAssistant: Nice city\nUser: I work at a bakery" in new_ann
    assert texts(core, BOB) == old_bob | {"Bob joined a club"}
    assert factory.current_generation(ShardLayout(settings, 0)) == 2
    assert core.generation_info() == {"shard": 0, "current": 2, "generations": [1, 2], "staging": None}
    assert core.search(ANN, {"query": "sister Ines"})[0].entry.provenance == ["s2/s2-0", "s2/s2-1"]


def test_the_pointer_file_is_read_at_start(core: ShardCore, settings: Settings, hashing_embedder: Any) -> None:
    core.begin_generation(2, [], ["ann"])
    core.reextract_user(2, ANN, VERBATIM_SESSION)
    core.switch_generation(2)
    expected = texts(core, ANN)
    core.close()
    again = ShardCore(settings, 0, hashing_embedder, start_workers=False)
    try:
        assert texts(again, ANN) == expected and again.generations.current == 2
    finally:
        again.close()


def test_abort_and_drop(core: ShardCore, settings: Settings) -> None:
    before = texts(core, ANN)
    core.begin_generation(2, [], [])
    assert ShardLayout(settings, 0).generation_dir(2).exists()
    core.abort_generation(2)
    assert not ShardLayout(settings, 0).generation_dir(2).exists() and texts(core, ANN) == before
    core.begin_generation(3, [], [])
    core.reextract_user(3, ANN, VERBATIM_SESSION)
    core.switch_generation(3)
    with pytest.raises(ValidationError):
        core.drop_generation(3)
    assert core.drop_generation(1)["removed"]
    assert not ShardLayout(settings, 0).vectors_dir().exists()
    assert core.generation_info()["generations"] == [3]
    assert len(texts(core, ANN)) == 3


def test_switch_waits_for_writes_in_progress_and_holds_new_ones(core: ShardCore) -> None:
    core.begin_generation(2, [], ["ann"])
    core.reextract_user(2, ANN, VERBATIM_SESSION)
    release = threading.Event()
    entered = threading.Event()

    def slow_write() -> None:
        with core.ctx.writing(BOB):
            entered.set()
            release.wait(5)
            core.service.add(BOB, {"text": "written while the switch waits"})

    writer = threading.Thread(target=slow_write)
    writer.start()
    entered.wait(5)
    done: list[dict[str, Any]] = []
    switcher = threading.Thread(target=lambda: done.append(core.switch_generation(2)))
    switcher.start()
    switcher.join(0.3)
    assert not done  # the switch waits for the write in progress
    release.set()
    writer.join(5)
    switcher.join(5)
    assert done and done[0]["caught_up"] >= 1
    assert "written while the switch waits" in texts(core, BOB)  # carried over into generation 2
