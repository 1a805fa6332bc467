"""Memory of a process tree, sampled from /proc: the driver and every Ray process it started.

:class:`MemorySampler` samples RSS and PSS (MB, grouped driver / ray / worker) every ``interval`` seconds in a
thread; :func:`memory_trend` says whether a window of samples is flat (last third vs first third);
:class:`PeakMemory` keeps only the peaks (PSS of the tree and of its Ray workers, the RSS sum).
:func:`rss_mb` and :func:`peak_rss_mb` are this process's own.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def tree_pids(root: int) -> list[int]:
    """``root`` and every descendant (Ray's GCS, raylet, workers and replicas all descend from the driver)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def is_ray_worker(pid: int) -> bool:
    """A Ray worker (its process title starts with ``ray::``: tasks, actors, Serve replicas)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(b"ray::")
    except OSError:
        return False


def _proc_kb(pid: int) -> tuple[str, int, int]:
    """(group, RSS kB, PSS kB) of one process; group: driver, worker (``ray::`` titles) or ray (system)."""
    try:
        rss = pss = 0
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        return "gone", 0, 0
    group = "driver" if pid == os.getpid() else "worker" if is_ray_worker(pid) else "ray"
    return group, rss, pss


@dataclass
class MemorySampler:
    """Samples the driver's process tree every ``interval`` seconds in a thread."""

    interval: float = 1.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> dict[str, Any]:
        totals: Counter[str] = Counter()
        procs = 0
        for pid in tree_pids(os.getpid()):
            group, rss, pss = _proc_kb(pid)
            if group == "gone":
                continue
            procs += 1
            totals[f"rss_{group}"] += rss
            totals["rss"] += rss
            totals["pss"] += pss
        mb = {k: round(v / 1024, 1) for k, v in totals.items()}
        return {"t": time.monotonic(), "procs": procs, **mb}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def window(self, t0: float, t1: float) -> list[dict[str, Any]]:
        return [s for s in self.samples if t0 <= s["t"] <= t1]


def memory_trend(samples: list[dict[str, Any]], key: str = "rss") -> dict[str, Any]:
    """Mean of the first and last third of a window and the change between them (percent)."""
    values = [s[key] for s in samples if key in s]
    if len(values) < 3:
        return {"n": len(values)}
    third = len(values) // 3
    first, last = float(np.mean(values[:third])), float(np.mean(values[-third:]))
    return {"n": len(values), "first_third_mb": round(first, 1), "last_third_mb": round(last, 1),
            "change_pct": round(100 * (last - first) / first, 2), "max_mb": round(max(values), 1)}


def memory_bytes(pids: list[int], field: str = "Pss") -> int:
    """Memory of these processes from /proc/<pid>/smaps_rollup: ``Pss`` (shared pages — the object
    store's mapping, libraries — split between the processes that map them) or ``Rss``."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total


def rss_sum(pids: list[int]) -> int:
    """Resident bytes of these processes (``statm``: cheap, but the shared object store counts once per process)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


class PeakMemory:
    """Peak memory (PSS) of this process + its descendants (the Ray cluster it started), and of the
    ``ray::`` workers alone, every ``every_s`` (reading smaps_rollup walks page tables: not free); the
    peak RSS sum every second too. ``with PeakMemory() as peak: ...``; the peaks are bytes."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.peak_total = self.peak_workers = self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        last_pss = 0.0
        while not self._stop.is_set():
            pids = tree_pids(os.getpid())
            self.peak_rss = max(self.peak_rss, rss_sum(pids))
            if time.monotonic() - last_pss >= self.every_s:
                last_pss = time.monotonic()
                self.peak_total = max(self.peak_total, memory_bytes(pids))
                self.peak_workers = max(self.peak_workers, memory_bytes([p for p in pids if is_ray_worker(p)]))
            self._stop.wait(1.0)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process (this one by default), MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
