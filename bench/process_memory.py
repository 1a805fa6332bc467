"""Memory of a process tree, sampled from /proc: the driver and every Ray process it started.

:class:`MemorySampler` samples RSS and PSS (MB, grouped driver / ray / worker) every ``interval`` seconds in a
thread; :func:`memory_trend` says whether a window of samples is flat (last third vs first third).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def _tree_pids(root: int) -> list[int]:
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


def _proc_kb(pid: int) -> tuple[str, int, int]:
    """(group, RSS kB, PSS kB) of one process; group: driver, worker (``ray::`` titles) or ray (system)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        rss = pss = 0
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        return "gone", 0, 0
    group = "driver" if pid == os.getpid() else "worker" if cmd.startswith("ray::") else "ray"
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
        for pid in _tree_pids(os.getpid()):
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
