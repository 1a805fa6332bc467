"""actors.write_gate: a user's turn, then the gate; the dirty mark while any write is under way; a frozen
gate waits for the writes in flight and holds back new ones."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from actors.queues import UserQueues
from actors.write_gate import WriteGate
from memcore.errors import FencedError
from memcore.model import UserKey

ALICE, BOB = UserKey(app="a", user="alice"), UserKey(app="a", user="bob")


def test_the_dirty_mark_lasts_from_the_first_write_in_to_the_last_out(tmp_path: Path) -> None:
    dirty = tmp_path / "dirty"
    gate = WriteGate(UserQueues(), dirty)
    with gate.writing(ALICE) as seq:
        assert seq == 1 and dirty.exists()
        with gate.writing(BOB):
            assert dirty.exists()
        assert dirty.exists()  # alice's write is still under way
    assert not dirty.exists()
    with gate.writing(ALICE) as seq:
        assert seq == 2


def test_frozen_waits_for_writes_in_flight_and_holds_back_new_ones(tmp_path: Path) -> None:
    gate = WriteGate(UserQueues(), tmp_path / "dirty")
    events: list[str] = []
    writing, frozen_asked = threading.Event(), threading.Event()

    def first_write() -> None:
        with gate.writing(ALICE):
            writing.set()
            frozen_asked.wait(5)
            time.sleep(0.1)
            events.append("write out")

    def freeze() -> None:
        writing.wait(5)
        frozen_asked.set()
        with gate.frozen():
            events.append("frozen")
            time.sleep(0.05)
            events.append("thawed")

    def late_write() -> None:
        frozen_asked.wait(5)
        time.sleep(0.05)
        with gate.writing(BOB):
            events.append("late write in")

    threads = [threading.Thread(target=f) for f in (first_write, freeze, late_write)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert events == ["write out", "frozen", "thawed", "late write in"]


def test_a_fenced_write_is_refused_and_leaves_neither_mark_nor_a_stuck_gate(tmp_path: Path) -> None:
    dirty = tmp_path / "dirty"

    def fenced() -> None:
        raise FencedError("shard 0 was taken over by epoch 2")

    gate = WriteGate(UserQueues(), dirty, fenced)
    with pytest.raises(FencedError), gate.writing(ALICE):
        pytest.fail("a fenced write must not run")
    assert not dirty.exists()
    with gate.frozen():  # nobody is left holding the gate
        pass


def test_a_write_that_cannot_set_the_mark_fails_and_the_gate_still_freezes(tmp_path: Path) -> None:
    gate = WriteGate(UserQueues(), tmp_path / "missing" / "dirty")  # its directory does not exist
    with pytest.raises(FileNotFoundError), gate.writing(ALICE):
        pytest.fail("the write must not run without its dirty mark")
    done = threading.Event()

    def freeze() -> None:
        with gate.frozen():
            done.set()

    t = threading.Thread(target=freeze)
    t.start()
    t.join(5)
    assert done.is_set()
