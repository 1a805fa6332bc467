"""bench.harness.cpu: per-process and per-thread CPU from /proc, grouped into the benchmark's roles."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from bench.harness import cpu

pytestmark = pytest.mark.skipif(not cpu.PROC.is_dir(), reason="needs /proc (Linux)")

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(30)\n"


def test_roles_come_from_ray_titles_and_command_lines() -> None:
    assert cpu.role_of(os.getpid(), "python -m bench.http_api", "python") == cpu.CLIENT
    assert cpu.role_of(1, "ray::ServeReplica:memcluster:Ingress", "ray::ServeRepli") == "Serve replica Ingress"
    assert cpu.role_of(1, "ray::ShardCore.search_json", "ray::ShardCore") == "actor ShardCore"
    assert cpu.role_of(1, "ray::ShardCore", "ray::ShardCore") == "actor ShardCore"
    assert cpu.role_of(1, "ray::ProxyActor", "ray::ProxyActor") == "Serve proxy"
    assert cpu.role_of(1, "/x/haproxy -f /tmp/cfg", "haproxy") == "HAProxy"
    assert cpu.role_of(1, "/venv/lib/ray/core/src/ray/raylet/raylet --node", "raylet") == "Ray daemons"
    assert cpu.role_of(1, "sshd: root", "sshd") == cpu.OTHER


def test_a_child_that_burns_cpu_is_read_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.4)])
    try:
        before = cpu.snapshot()
        time.sleep(1.0)
        after = cpu.snapshot()
    finally:
        child.kill()
        child.wait()
    assert before.processes[child.pid][0] == cpu.OTHER
    used = after.processes[child.pid][1] - before.processes[child.pid][1]
    assert 0.2 <= used <= 0.45  # it burns 0.4 s of CPU, some of it before the first snapshot
    assert after.total > before.total and after.busy >= before.busy


def test_cpu_is_summed_by_role_per_request() -> None:
    before = cpu.Snapshot({1: ("actor ShardCore", 1.0), 2: ("actor ShardCore", 2.0), 3: (cpu.OTHER, 5.0)}, 100, 200)
    after = cpu.Snapshot({1: ("actor ShardCore", 1.2), 2: ("actor ShardCore", 2.2), 3: (cpu.OTHER, 5.0),
                          4: ("HAProxy", 0.1)}, 150, 300)  # pid 4 started in the window: counted from zero
    usage = cpu.cpu_by_role(before, after, requests=100)
    assert usage["cpu_ms_per_request"] == {"actor ShardCore": 4.0, "HAProxy": 1.0}
    assert usage["cpu_ms_per_request_total"] == 5.0
    assert usage["machine_busy_share"] == 0.5
    assert usage["cores"] == os.cpu_count()


def test_threads_are_charged_by_name_and_pools_merged() -> None:
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=burn)
    targets = [(cpu.CLIENT, os.getpid())]
    before = cpu.threads([os.getpid()])
    worker.start()
    time.sleep(0.5)
    after = cpu.threads([os.getpid()])  # while it runs: a thread that has ended is gone from /proc
    stop.set()
    worker.join()
    by_thread = cpu.threads_by_role(targets, before, after, requests=1)[cpu.CLIENT]
    assert sum(by_thread.values()) >= 100  # ms: the burning thread ran ~0.5 s (it shares the GIL with nobody)
    assert all(not name[-1].isdigit() for name in by_thread)


def test_pids_of_picks_roles_by_prefix() -> None:
    snap = cpu.Snapshot({10: ("actor ShardCore", 1.0), 11: ("Serve replica Ingress", 1.0), 12: (cpu.OTHER, 1.0)},
                        0, 0)
    assert cpu.pids_of(snap, "actor Shard", "Serve replica") == [("Serve replica Ingress", 11), ("actor ShardCore", 10)]
    assert cpu.cpu_by_role(snap, cpu.Snapshot({}, 0, 0), requests=1) == {"available": False}
