"""The multi-node scenario of ``tests/cluster/test_multinode.py``, run in a subprocess of its own:

    python -m tests.cluster.multinode_scenario OUT.json DATA_DIR [--serve]

It starts a simulated multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head
and three worker raylets, one CPU each), its own, so it never meets the test session's Ray; writes
through the shard router while a worker node is removed; and writes what it saw to ``OUT.json``.
The test asserts on that file. Set ``RAY_TMPDIR`` to a private directory: Ray's session files and
its "current cluster" address file then stay out of ``/tmp/ray``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

MB = 1024 * 1024
LOOPBACK = "127.0.0.1"  # every node of the simulated cluster is this machine
SHARDS = 4
PER_SHARD = 2  # users per shard
BEFORE = 10  # acknowledged writes per user before the node goes
AFTER = 3  # ... and at least this many per user after the victims came back
NAMESPACE = "multinode"
INGRESS_REPLICAS = 4  # with Serve: one per node (Serve spreads replicas)
SYSTEM_CONFIG = {  # notice a dead raylet within seconds (defaults: about 30 s)
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


def pick_users() -> list[str]:
    """``PER_SHARD`` users of app ``app`` on each shard (by the stable routing hash)."""
    from memcore.ids import shard_of
    from memcore.model import UserKey

    users: list[str] = []
    count = dict.fromkeys(range(SHARDS), 0)
    i = 0
    while min(count.values()) < PER_SHARD:
        user, i = f"user-{i}", i + 1
        k = shard_of(UserKey(app="app", user=user), SHARDS)
        if count[k] < PER_SHARD:
            users.append(user)
            count[k] += 1
    return users


USERS = pick_users()


def replica_nodes(prefix: str) -> list[str]:
    """Node ids of the alive actors whose class name starts with ``prefix`` (Serve replicas)."""
    import ray._private.state as state

    return sorted(a["Address"]["NodeID"] for a in state.actors().values()
                  if a["ActorClassName"].startswith(prefix) and a["State"] == "ALIVE")


def wait_until_spread(nodes: int, timeout_s: float = 60.0) -> None:
    """Block until zero-CPU ``SPREAD`` tasks from this driver land on ``nodes`` distinct nodes: its raylet then
    sees every node, so the shards (``SPREAD`` actors) spread too. ``Cluster.wait_for_nodes`` waits for the GCS
    only; a raylet whose view lags places every shard on itself, and the scenario then has no node to lose."""
    import ray

    @ray.remote(num_cpus=0, scheduling_strategy="SPREAD")
    def where() -> str:
        time.sleep(0.05)  # held a moment, so the tasks of one round cannot all run in turn on one node
        return str(ray.get_runtime_context().get_node_id())

    deadline = time.monotonic() + timeout_s
    while len(set(ray.get([where.remote() for _ in range(nodes * 4)]))) < nodes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"SPREAD tasks did not reach {nodes} nodes in {timeout_s:g} s")
        time.sleep(0.5)


def actor_node(handle: Any) -> tuple[str, int, int]:
    """(node id, pid, restarts) of an actor, from the GCS actor table."""
    import ray._private.state as state

    info = state.actors(actor_id=handle._actor_id.hex())
    return info["Address"]["NodeID"], int(info["Pid"]), int(info["NumRestarts"])


async def restarted(backend: Any, handle: Any, shard: int, old_pid: int, t0: float) -> dict[str, Any]:
    """The status of shard ``shard`` once it runs in a new process (the old one may linger a moment after its
    node was removed, failing calls on its deleted keyword directory)."""
    import ray._private.state as state

    from memcore.errors import StoreError

    while True:
        if time.monotonic() - t0 > 120:
            raise TimeoutError(f"shard {shard} did not restart")
        info = state.actors(actor_id=handle._actor_id.hex())
        if info["State"] == "ALIVE" and int(info["Pid"]) != old_pid:
            try:
                status: dict[str, Any] = await backend.call_shard(shard, "status")
                if status["pid"] != old_pid:
                    return status
            except StoreError:
                pass
        await asyncio.sleep(0.2)


class Writer:
    """Writes to every user in turn through the router, recording what was acknowledged and what failed."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.acked: dict[str, list[str]] = {u: [] for u in USERS}
        self.failed: list[str] = []
        self.n = 0
        self.held: set[str] = set()  # users not written to for now (skipped, not failed)

    async def write(self, user: str) -> bool:
        from memcore.errors import StoreError
        from memcore.model import UserKey

        if user in self.held:
            return False
        self.n += 1
        key = UserKey(app="app", user=user)
        try:
            ack = await self.backend.call(key, "add", {"text": f"{user} ledger line {self.n} kiwi"})
        except StoreError as exc:  # the shard is restarting: not acknowledged, the client would retry
            self.failed.append(f"{user}: {exc}")
            return False
        except Exception as exc:  # noqa: BLE001 - not acknowledged either; reported (the test expects none)
            self.failed.append(f"{user}: unexpected {type(exc).__name__}: {str(exc)[:500]}")
            return False
        self.acked[user].append(ack.value.id)
        return True


async def scenario(cluster: Any, workers: list[Any], data_dir: Path, serve: bool) -> dict[str, Any]:
    import ray

    from actors.router import RayShardBackend
    from memcore.ids import shard_of
    from memcore.layout import ShardLayout
    from memcore.model import UserKey
    from memcore.settings import Settings

    out: dict[str, Any] = {}
    settings = Settings(data_dir=data_dir, shards=SHARDS, namespace=NAMESPACE,
                        embedder={"kind": "hashing", "dim": 64})
    out["user_shards"] = {u: shard_of(UserKey(app="app", user=u), SHARDS) for u in USERS}
    base = deploy_serve(settings) if serve else None  # its ingress creates the shards, as in production
    backend = RayShardBackend(settings, read_retry_s=120.0)
    handles = backend.ensure_all()
    await asyncio.gather(*(h.ping.remote() for h in handles))
    head_id = cluster.head_node.node_id
    worker_ids = {w.node_id: w for w in workers}
    placed = {k: actor_node(h) for k, h in enumerate(handles)}
    out["nodes"] = {"head": head_id, "workers": sorted(worker_ids)}
    out["placement_before"] = {k: node for k, (node, _, _) in placed.items()}
    if serve:
        out["ingress_before"] = replica_nodes(INGRESS_CLASS)

    writer = Writer(backend)
    for _ in range(BEFORE):
        for u in USERS:
            assert await writer.write(u), writer.failed[-1]
    out["acked_before"] = sum(len(v) for v in writer.acked.values())

    # the victim: the worker node holding the most shards (and an ingress replica, with Serve); the
    # driver is on the head, which must stay
    by_node: dict[str, list[int]] = {}
    for k, node in out["placement_before"].items():
        by_node.setdefault(node, []).append(k)
    ingress = out.get("ingress_before", [])
    victim_id = max(worker_ids, key=lambda n: (n in ingress, len(by_node.get(n, [])), n))
    victims = sorted(by_node.get(victim_id, []))
    out["victim_node"], out["victim_shards"] = victim_id, victims
    # the node's local disk goes with it: its shards' keyword indexes (derived data). Their vector
    # stores stay readable, as they would on a shared volume or, in server mode, in Qdrant. The victims
    # get no write from here until their node is gone, and their staged keyword writes are committed
    # first (a count commits them). The directory is moved away in one step, not removed file by file:
    # Tantivy's merge thread may still be writing into it, and an rmtree racing it left a whole index
    # behind (the merged segment and a new meta.json), so the successor found nothing to rebuild.
    writer.held = {u for u, k in out["user_shards"].items() if k in victims}
    lost: list[Path] = []
    for k in victims:
        await backend.call_shard(k, "status")
        keywords = ShardLayout(settings, k).keywords_dir()
        lost.append(keywords.rename(keywords.with_name(f"{keywords.name}.lost")))

    stop = asyncio.Event()

    async def keep_writing() -> None:
        while not stop.is_set():
            for u in USERS:
                await writer.write(u)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(keep_writing())
    probe = HttpProbe(base, [u for u in USERS if out["user_shards"][u] not in victims]) if base else None
    probe_task = asyncio.create_task(probe.run(stop)) if probe else None
    if probe:  # answers before the removal, for comparison: at least 1 s of them, and 5 (a busy machine is slow)
        await asyncio.sleep(1.0)
        deadline = time.monotonic() + 30
        while len(probe.samples) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    t0 = time.monotonic()
    await asyncio.to_thread(cluster.remove_node, worker_ids[victim_id], False)
    writer.held = set()  # the victims' users again: their shards are restarting (refused, retried)
    out["removed_after_s"] = round(time.monotonic() - t0, 2)
    # the victims come back on surviving nodes: Ray restarts them (the GCS actor table), then they answer
    statuses = {k: await restarted(backend, handles[k], k, placed[k][1], t0) for k in victims}
    recovered = time.monotonic()
    for path in lost:  # the old processes are gone: nothing writes into the moved directories any more
        shutil.rmtree(path, ignore_errors=True)
    out["recovered_s"] = round(recovered - t0, 2)
    acked_at_recovery = {u: len(v) for u, v in writer.acked.items()}
    while any(len(writer.acked[u]) < acked_at_recovery[u] + AFTER for u in USERS):
        if time.monotonic() - t0 > 150:
            raise TimeoutError(f"writes did not resume: {writer.failed[-3:]}")
        await asyncio.sleep(0.2)
    stop.set()
    await task
    if probe and probe_task:
        await probe_task
        out["serve"] = probe.report(t0, recovered)
        out["serve"]["ingress_after"] = replica_nodes(INGRESS_CLASS)
        out["serve"]["writes_after"] = await http_writes(base, [u for u in USERS if out["user_shards"][u] in victims])

    placed_after = {k: actor_node(h) for k, h in enumerate(handles)}
    out["placement_after"] = {k: node for k, (node, _, _) in placed_after.items()}
    out["restarts"] = {k: placed_after[k][2] for k in range(SHARDS)}
    out["pid_changed"] = {k: placed_after[k][1] != placed[k][1] for k in range(SHARDS)}
    out["alive_nodes"] = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    out["victim_status"] = {k: {f: s[f] for f in ("rebuilt_on_start", "entries", "keyword_docs")}
                            for k, s in statuses.items()}
    final = {k: await backend.call_shard(k, "status") for k in range(SHARDS)}
    out["final_status"] = {k: {f: s[f] for f in ("rebuilt_on_start", "entries", "keyword_docs")}
                           for k, s in final.items()}
    missing: dict[str, list[str]] = {}
    found_by_keyword: dict[str, int] = {}
    for u in USERS:
        key = UserKey(app="app", user=u)
        stored = {e.id for e in await backend.call(key, "read", 10_000)}
        missing[u] = sorted(set(writer.acked[u]) - stored)
        hits = await backend.call(key, "search", {"query": "kiwi ledger", "max_results": 1000, "hybrid": True})
        found_by_keyword[u] = len({h.entry.id for h in hits} & set(writer.acked[u]))
    out["acked"] = {u: len(v) for u, v in writer.acked.items()}
    out["failed_writes"] = len(writer.failed)
    out["failed_samples"] = writer.failed[:3]
    out["failed_unexpected"] = [f for f in writer.failed if ": unexpected " in f][:5]
    out["missing"] = missing
    out["found_by_search"] = found_by_keyword
    return out


INGRESS_CLASS = "ServeReplica:memcluster:Ingress"


def deploy_serve(settings: Any) -> str:
    """The Serve app over this cluster: the HTTP proxy on the head only (every node is this machine, so a
    proxy per node would fight over one port), ingress replicas spread over the nodes."""
    from ray import serve

    from serve_apps.builder import build_app
    from tests.conftest import free_port

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"})
    app_settings = {**settings.model_dump(mode="json"), "ingress_replicas": INGRESS_REPLICAS, "embedder_replicas": 2}
    serve.run(build_app({"settings": app_settings, "ingress_num_cpus": 0.05, "embedder_num_cpus": 0.05}),
              name="memcluster", route_prefix="/")
    base = f"http://127.0.0.1:{port}"
    from cluster.deploy import wait_ready

    if wait_ready(base, 120, interval=0.5) is None:
        raise TimeoutError("Serve app not ready")
    return base


class HttpProbe:
    """Reads of users on surviving shards through Serve's proxy, back to back, with their outcome over time."""

    def __init__(self, base: str, users: list[str]) -> None:
        self.base, self.users = base, users
        self.samples: list[tuple[float, int]] = []  # (monotonic time, status; 0 = no answer)

    async def run(self, stop: asyncio.Event) -> None:
        import httpx

        async with httpx.AsyncClient(base_url=self.base, timeout=10) as client:
            i = 0
            while not stop.is_set():
                user = self.users[i % len(self.users)]
                i += 1
                try:
                    r = await client.post(f"/v1/apps/app/users/{user}/memories/search",
                                          json={"query": "ledger kiwi", "max_results": 5})
                    status = r.status_code if r.status_code != 200 or r.json()["hits"] else -1
                except httpx.HTTPError:
                    status = 0
                self.samples.append((time.monotonic(), status))
                await asyncio.sleep(0.05)

    def report(self, t0: float, recovered: float) -> dict[str, Any]:
        """Outcomes before the removal, during the outage (until the lost shards answered again), after."""
        before = [s for t, s in self.samples if t < t0]
        during = [s for t, s in self.samples if t0 <= t < recovered]
        after = [s for t, s in self.samples if t >= recovered]
        return {"before": len(before), "before_ok": before.count(200), "during": len(during),
                "during_ok": during.count(200), "after": len(after), "after_ok": after.count(200),
                "statuses": sorted(set(during + after)), "last_20": [s for _, s in self.samples[-20:]]}


async def http_writes(base: str, users: list[str]) -> dict[str, Any]:
    """After the recovery, write to and read back users of the restarted shards through Serve."""
    import httpx

    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for user in users:
            r = await client.post(f"/v1/apps/app/users/{user}/memories", json={"text": f"{user} after the node loss"})
            got = await client.get(f"/v1/apps/app/users/{user}/memories/{r.json()['id']}") if r.status_code == 201 \
                else None
            out[user] = [r.status_code, got.status_code if got is not None else None]
    return out


def main() -> int:
    out_path, data_dir = Path(sys.argv[1]), Path(sys.argv[2])
    serve = "--serve" in sys.argv[3:]
    import ray
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    result: dict[str, Any] = {}
    node = {"num_cpus": 1, "object_store_memory": 80 * MB, "node_ip_address": LOOPBACK}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node, "include_dashboard": False, "_system_config": SYSTEM_CONFIG})
    try:
        workers = [cluster.add_node(**node) for _ in range(3)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False,
                 _node_ip_address=LOOPBACK)
        wait_until_spread(1 + len(workers))
        result["started_s"] = round(time.monotonic() - t0, 2)
        result.update(asyncio.run(scenario(cluster, workers, data_dir, serve)))
    except BaseException as exc:
        import traceback

        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
        raise
    finally:
        result["wall_s"] = round(time.monotonic() - t0, 2)
        out_path.write_text(json.dumps(result, indent=1, sort_keys=True))
        done = threading.Event()

        def stop() -> None:
            try:
                ray.shutdown()
                cluster.shutdown()
            finally:
                done.set()

        threading.Thread(target=stop, daemon=True).start()
        done.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
