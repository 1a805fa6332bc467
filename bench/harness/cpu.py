"""Where a benchmark's CPU goes, by process: every process's CPU time from ``/proc`` before and after a
measured window, grouped into roles (the load client, HAProxy, each Serve deployment's replicas, the shard
actors, Serve's proxy, Ray's own daemons), and the machine's busy share from ``/proc/stat``.

    before = snapshot()
    ...                                   # the measured requests
    usage = cpu_by_role(before, snapshot(), requests=n)

A process's CPU time is its user + system time (all its threads); processes that start in the window
count from zero, ones that end in it are lost (none do in a steady benchmark). Linux only: elsewhere
:func:`snapshot` is empty and the figures say so (``available: false``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_METHOD = re.compile(r"\.[A-Za-z_]\w*$")

CLIENT = "load client (this process)"
OTHER = "other processes"


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds per process (pid -> (role, seconds)) and the machine's (busy, total) jiffies."""

    processes: dict[int, tuple[str, float]]
    busy: int
    total: int


def role_of(pid: int, cmdline: str, comm: str) -> str:
    """The role a process plays in the benchmark, from its command line (Ray workers title themselves
    ``ray::<actor class or deployment>[.<method>]``)."""
    if pid == os.getpid():
        return CLIENT
    if comm == "haproxy" or "haproxy" in cmdline.split(" ", 1)[0]:
        return "HAProxy"
    if cmdline.startswith("ray::"):
        title = cmdline[5:].split(" ", 1)[0]
        if title.startswith("ServeReplica:"):
            return "Serve replica " + title.split(":")[-1]
        if title.startswith("ProxyActor"):
            return "Serve proxy"
        if title.startswith("ServeController"):
            return "Serve controller"
        return "actor " + _METHOD.sub("", title)
    for daemon in ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env"):
        if daemon in cmdline:
            return "Ray daemons"
    return OTHER


def _cpu_seconds(pid_dir: Path) -> float | None:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


def _machine() -> tuple[int, int]:
    try:
        cpu = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0, 0
    jiffies = [int(x) for x in cpu[:8]]
    idle = jiffies[3] + jiffies[4]  # idle + iowait
    return sum(jiffies) - idle, sum(jiffies)


def snapshot() -> Snapshot:
    """Every readable process's CPU seconds and role, and the machine's jiffies, now."""
    out: dict[int, tuple[str, float]] = {}
    if PROC.is_dir():
        for pid_dir in PROC.iterdir():
            if not pid_dir.name.isdigit():
                continue
            seconds = _cpu_seconds(pid_dir)
            if seconds is None:
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                comm = (pid_dir / "comm").read_text().strip()
            except OSError:
                continue
            out[int(pid_dir.name)] = (role_of(int(pid_dir.name), cmdline, comm), seconds)
    busy, total = _machine()
    return Snapshot(out, busy, total)


def cpu_by_role(before: Snapshot, after: Snapshot, *, requests: int) -> dict[str, Any]:
    """CPU milliseconds per request by role between two snapshots, their sum, and the machine's busy share
    (of all its cores) in the window."""
    if not after.processes:
        return {"available": False}
    per_role: dict[str, float] = {}
    for pid, (role, seconds) in after.processes.items():
        start = before.processes.get(pid, (role, 0.0))[1]
        per_role[role] = per_role.get(role, 0.0) + max(seconds - start, 0.0)
    n = max(requests, 1)
    roles = {r: round(s * 1e3 / n, 2) for r, s in sorted(per_role.items(), key=lambda kv: -kv[1]) if s > 0}
    window = after.total - before.total
    return {
        "available": True,
        "requests": requests,
        "cpu_ms_per_request": roles,
        "cpu_ms_per_request_total": round(sum(per_role.values()) * 1e3 / n, 2),
        "machine_busy_share": round((after.busy - before.busy) / window, 3) if window > 0 else None,
        "cores": os.cpu_count(),
    }


def threads(pids: list[int]) -> dict[tuple[int, str], float]:
    """CPU seconds of every thread of ``pids``, summed by (pid, thread name): Ray's C++ threads, gRPC's,
    ONNX Runtime's pool and Python's threads each name themselves. A thread that ends between two readings
    is missing from the second, so read while the work runs."""
    out: dict[tuple[int, str], float] = {}
    for pid in pids:
        task = PROC / str(pid) / "task"
        try:
            tids = list(task.iterdir())
        except OSError:
            continue
        for tid in tids:
            seconds = _cpu_seconds(tid)
            try:
                name = (tid / "comm").read_text().strip()
            except OSError:
                continue
            if seconds is not None:
                out[(pid, name)] = out.get((pid, name), 0.0) + seconds
    return out


def threads_by_role(
    targets: list[tuple[str, int]],
    before: dict[tuple[int, str], float],
    after: dict[tuple[int, str], float],
    *,
    requests: int,
) -> dict[str, dict[str, float]]:
    """role -> thread name -> CPU ms per request between two :func:`threads` readings (the role's processes
    summed; names ending in digits, as pools number their threads, merged)."""
    role_of_pid = {pid: role for role, pid in targets}
    out: dict[str, dict[str, float]] = {}
    for (pid, name), seconds in after.items():
        used = seconds - before.get((pid, name), 0.0)
        if used <= 0 or pid not in role_of_pid:
            continue
        merged = re.sub(r"[-_ ]?\d+$", "", name) or name
        role = out.setdefault(role_of_pid[pid], {})
        role[merged] = role.get(merged, 0.0) + used * 1e3 / max(requests, 1)
    return {
        r: {k: round(v, 2) for k, v in sorted(t.items(), key=lambda kv: -kv[1]) if v >= 0.01} for r, t in out.items()
    }


def pids_of(snap: Snapshot, *roles: str) -> list[tuple[str, int]]:
    """(role, pid) of every process of ``roles`` in ``snap`` (roles that start with one of them count)."""
    return sorted((role, pid) for pid, (role, _) in snap.processes.items() if role.startswith(roles))
