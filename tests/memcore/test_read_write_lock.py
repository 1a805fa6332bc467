"""memcore.read_write_lock: readers share, a writer excludes them and is not starved by new ones."""

from __future__ import annotations

import threading
import time

from memcore.read_write_lock import ReadWriteLock


def test_readers_share_the_lock() -> None:
    lock = ReadWriteLock()
    inside = threading.Barrier(3, timeout=5)

    def read() -> None:
        with lock.shared():
            inside.wait()  # all three are inside at once, or the barrier times out

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not inside.broken


def test_a_writer_waits_for_readers_in_flight_and_holds_back_new_ones() -> None:
    lock = ReadWriteLock()
    events: list[str] = []
    first_in, writer_waiting = threading.Event(), threading.Event()

    def first_reader() -> None:
        with lock.shared():
            first_in.set()
            writer_waiting.wait(5)
            time.sleep(0.1)  # the late reader has arrived by now: it must not get in before the writer
            events.append("first reader out")

    def writer() -> None:
        first_in.wait(5)
        writer_waiting.set()
        with lock.exclusive():
            events.append("writer in")
            time.sleep(0.05)
            events.append("writer out")

    def late_reader() -> None:
        writer_waiting.wait(5)
        time.sleep(0.05)
        with lock.shared():
            events.append("late reader in")

    threads = [threading.Thread(target=f) for f in (first_reader, writer, late_reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert events == ["first reader out", "writer in", "writer out", "late reader in"]


def test_writers_exclude_each_other() -> None:
    lock = ReadWriteLock()
    holders, most = 0, 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal holders, most
        for _ in range(50):
            with lock.exclusive():
                with guard:
                    holders += 1
                    most = max(most, holders)
                with guard:
                    holders -= 1

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most == 1
