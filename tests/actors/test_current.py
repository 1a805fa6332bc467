"""The serving service's read lease (:mod:`actors.current`): a compaction closes and reopens the serving
stores while reads go on; a read waits for the reopened stores and never fails on a closed one."""

from __future__ import annotations

import threading
import time
from typing import Any

from actors.current import CurrentService
from memcore.model import UserKey
from tests.actors.conftest import MakeCore


def test_closing_waits_for_reads_in_flight_and_holds_new_ones() -> None:
    first, second = object(), object()
    current = CurrentService(first)  # type: ignore[arg-type]
    order: list[str] = []
    reading, release = threading.Event(), threading.Event()

    def long_read() -> None:
        with current.reading() as service:
            assert service is first
            reading.set()
            release.wait(5)
            order.append("first read done")

    def swap() -> None:
        with current.closing():
            order.append("closing")
            time.sleep(0.2)  # a read that arrives now waits
            current.replace(second)  # type: ignore[arg-type]
            order.append("replaced")

    late: list[Any] = []

    def late_read() -> None:
        with current.reading() as service:
            late.append(service)
            order.append("late read")

    reader = threading.Thread(target=long_read)
    reader.start()
    assert reading.wait(5)
    swapper = threading.Thread(target=swap)
    swapper.start()
    time.sleep(0.1)
    assert order == []  # the swap waits for the read in flight
    release.set()
    reader.join(5)
    time.sleep(0.05)
    waiter = threading.Thread(target=late_read)
    waiter.start()
    swapper.join(5)
    waiter.join(5)
    assert order == ["first read done", "closing", "replaced", "late read"]
    assert late == [second]  # it read the reopened service, not the closed one


def test_searches_during_repeated_compactions_never_meet_a_closed_store(make_core: MakeCore) -> None:
    core = make_core()
    user = UserKey(app="app", user="u1")
    core.add_many(user, [{"text": f"note {i} about the harbour ferry"} for i in range(200)])
    errors: list[BaseException] = []
    counts: list[int] = []
    stop = threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                counts.append(len(core.search(user, {"query": "harbour ferry", "max_results": 5})))
                core.read(user, limit=3)
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)
                return

    threads = [threading.Thread(target=search_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            core.delete(user, core.read(user, limit=1)[0].id, hard=True)  # something for the compaction to drop
            result = core.compact()
            assert result, result
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert errors == []
    assert len(counts) > 10 and all(n == 5 for n in counts)
