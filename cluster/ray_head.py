"""The local Ray head ``memctl up`` starts, and only that one: started with a tag of its own in its
environment, found again by that tag, stopped within a bound.

Other Ray clusters may run on the same host (another memctl home, a test's cluster, a ``ray start``
by hand), in the same network namespace or another one, with Ray's default temp dir (``/tmp/ray``)
or their own (``RAY_TMPDIR``, ``--temp-dir``). ``ray stop`` stops them all, and "the newest session in
``/tmp/ray``" may be any of them, so memctl never uses either. Every process of the head it starts
inherits :data:`TAG_VAR` (raylet, GCS, workers, agents, the Ray client server, and what they start);
memctl records the tag, the GCS address, the session dir Ray chose and the head's PIDs in its state
file, and :func:`stop` signals the processes that carry the tag, name that session dir or hold a file
open under it, plus their descendants. Nothing here imports Ray: it works the same when the head is already dead.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.deploy import port_in_use

TAG_VAR = "MEMCLUSTER_RAY_TAG"
"""Set in the environment of the ``ray start`` that ``memctl up`` runs; its value is new for every ``up``."""
START_TIMEOUT_S = 180.0
"""How long ``ray start`` may take (it is ~10 s on an idle machine; a loaded 2-core one needs more)."""
TERM_GRACE_S = 5.0
"""How long :func:`stop` waits after SIGTERM before it sends SIGKILL."""
KILL_WAIT_S = 5.0
"""How long :func:`stop` waits for SIGKILLed processes to be gone."""
HEAD_PROCESSES = ("gcs_server", "raylet")


class RayStartError(RuntimeError):
    """``ray start`` gave no head; the message is one line that names what to change."""


@dataclass(frozen=True)
class Head:
    """One Ray head memctl started."""

    tag: str
    gcs: str
    session_dir: str | None = None
    """Ray's session dir (``<temp dir>/session_<date>_<pid>``), read from the GCS it started."""
    pids: dict[str, int] = field(default_factory=dict)
    """``gcs_server`` and ``raylet`` PIDs (for people; :func:`stop` goes by the tag, PIDs get reused)."""

    @property
    def temp_dir(self) -> str | None:
        return str(Path(self.session_dir).parent) if self.session_dir else None

    def to_state(self) -> dict[str, Any]:
        return {"gcs": self.gcs, "ray_tag": self.tag, "ray_session_dir": self.session_dir,
                "ray_temp_dir": self.temp_dir, "ray_pids": self.pids}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Head | None:
        """The head a state file records; None when memctl started none (a state file of an older memctl
        that attached to a running Ray)."""
        if not state.get("ray_tag") or not state.get("started_ray", True):
            return None
        return cls(str(state["ray_tag"]), str(state["gcs"]), state.get("ray_session_dir"),
                   dict(state.get("ray_pids") or {}))

    def alive(self) -> bool:
        """True while both its GCS and its raylet run (found by the tag, so a reused PID is never ours)."""
        running = {_executable(pid) for pid in _tagged(self.tag)}
        return all(name in running for name in HEAD_PROCESSES)


def busy_reason(port: int) -> str | None:
    """Why ``port`` cannot be the GCS port of a new head, or None. Something listening on it here, or a
    Ray head on this host that uses it: Ray refuses such a port also when that head is in another network
    namespace (then nothing answers here), and a GCS port stays one cluster's on the whole host."""
    if port_in_use("127.0.0.1", port):
        return f"Ray port {port} is already in use on 127.0.0.1"
    flag = f"--gcs_server_port={port}"
    for pid, argv in _command_lines():
        if argv and Path(argv[0]).name == "gcs_server" and flag in argv:
            return (f"Ray port {port} is already used by another Ray head on this host (gcs_server pid {pid}, "
                    "maybe in another network namespace)")
    return None


def start(port: int, env: dict[str, str], log: Path, num_cpus: int | None = None,
          temp_dir: Path | None = None) -> Head:
    """``ray start --head`` on 127.0.0.1:``port`` with a new tag, Ray's output in ``log``. Raises
    :class:`RayStartError` (after stopping whatever it started) when no head came up."""
    reason = busy_reason(port)
    if reason:
        raise RayStartError(f"{reason}: stop it or choose another port with --ray-port")
    cmd = [_ray_bin(), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
           "--include-dashboard=false", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if temp_dir is not None:
        cmd.append(f"--temp-dir={temp_dir.expanduser().resolve()}")
    tag = uuid.uuid4().hex
    print("starting Ray:", " ".join(cmd), flush=True)
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with log.open("w") as out:
        try:
            rc = subprocess.run(cmd, env={**env, TAG_VAR: tag}, stdout=out, stderr=subprocess.STDOUT,
                                timeout=START_TIMEOUT_S, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = None
    head = find(tag, f"127.0.0.1:{port}")
    if rc == 0 and head.alive():
        return head
    stop(head)
    why = f"it did not finish within {START_TIMEOUT_S:g}s" if rc is None else _last_error(log)
    raise RayStartError(f"Ray did not start on port {port} ({why}); Ray's output is in {log} "
                        "(another port: --ray-port)")


def find(tag: str, gcs: str) -> Head:
    """The head whose processes carry ``tag``: its session dir and PIDs as its GCS and raylet show them."""
    pids: dict[str, int] = {}
    session_dir = None
    for pid in _tagged(tag):
        argv = _command_line(pid)
        name = Path(argv[0]).name if argv else ""
        if name in HEAD_PROCESSES:
            pids[name] = pid
        if name == "gcs_server":
            session_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("--session-dir=")), None)
    return Head(tag, gcs, session_dir, pids)


def stop(head: Head) -> int:
    """Stop every process of ``head`` (see :func:`processes`): SIGTERM, SIGKILL after
    :data:`TERM_GRACE_S`, and a last look for processes started meanwhile; then waits for the killed ones
    to be gone (a loaded machine can take seconds to tear down a process with many threads). Returns how
    many there were; takes at most about ``TERM_GRACE_S + 3 * KILL_WAIT_S``."""
    pids = set(processes(head))
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    _wait_gone(pids, TERM_GRACE_S)
    for _ in range(2):  # those that ignored SIGTERM, then any that a dying raylet started meanwhile
        late = {p for p in pids if _alive(p)} | (set(processes(head)) - pids)
        pids |= late
        for pid in late:
            _signal(pid, signal.SIGKILL)
        _wait_gone(late, KILL_WAIT_S)
    _wait_gone(pids | set(processes(head)), KILL_WAIT_S)
    return len(pids)


def processes(head: Head) -> list[int]:
    """Processes whose environment carries the head's tag, whose command line names its session dir or that
    hold a file open under it (its log files), plus all their descendants. Ray renames its workers and agents
    (``ray::ShardCore``, ``ray::DashboardAgent``): the new title may overwrite the start of the environment
    block as ``/proc`` shows it, the tag with it, and an agent whose raylet was killed has no tagged parent
    left; its open log files still name the session."""
    marker = f"{TAG_VAR}={head.tag}".encode()
    session = head.session_dir.encode() if head.session_dir else None
    parent: dict[int, int] = {}
    matched: set[int] = set()
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            parent[pid] = int(stat.rsplit(")", 1)[1].split()[1])
            if session is not None and _names(Path(f"/proc/{pid}/cmdline").read_bytes(), session):
                matched.add(pid)
            elif marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                matched.add(pid)
            elif session is not None and _holds(pid, session.decode()):
                matched.add(pid)
        except (OSError, IndexError, ValueError):
            continue
    grew = True
    while grew:
        kids = {p for p, pp in parent.items() if pp in matched and p not in matched}
        matched |= kids
        grew = bool(kids)
    matched.discard(os.getpid())
    return sorted(p for p in matched if _alive(p))


def _holds(pid: int, session_dir: str) -> bool:
    """True when ``pid`` has a file open under the session dir (one it may not read: False)."""
    prefix = session_dir.rstrip("/") + "/"
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(prefix):
                return True
        except OSError:
            continue
    return False


def _names(cmdline: bytes, session_dir: bytes) -> bool:
    """True when an argument names the session dir or a path under it (not another session whose name
    merely starts the same way)."""
    pattern = re.compile(rb"(?:^|[=\s])" + re.escape(session_dir) + rb"(?:$|[/\s])")
    return any(pattern.search(arg) for arg in cmdline.split(b"\0"))


def _tagged(tag: str) -> list[int]:
    marker = f"{TAG_VAR}={tag}".encode()
    found = []
    for pid in _pids():
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") and _alive(pid):
                found.append(pid)
        except OSError:
            continue
    return found


def _pids() -> Iterable[int]:
    return (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())


def _command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").rstrip("\0").split("\0") if raw else []


def _command_lines() -> Iterable[tuple[int, list[str]]]:
    return ((pid, _command_line(pid)) for pid in _pids())


def _executable(pid: int) -> str:
    argv = _command_line(pid)
    return Path(argv[0]).name if argv else ""


def _last_error(log: Path) -> str:
    """The last line of Ray's output that says something (its exception, usually)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _ray_bin() -> str:
    cand = Path(sys.executable).with_name("ray")
    return str(cand) if cand.exists() else "ray"


def _wait_gone(pids: set[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass
