"""The multi-node scenario with node-local disks and the archive in PostgreSQL, of
``tests/cluster/test_multinode_postgres.py``, run in a subprocess of its own:

    python -m tests.cluster.multinode_pg_scenario OUT.json WORK_DIR DSN SCHEMA

A simulated Ray cluster (``ray.cluster_utils.Cluster``: a head and three worker raylets, one CPU each);
each raylet gets its own local data root (``MEMCLUSTER_NODE_DATA_DIR`` in its environment, which its
workers inherit: :meth:`memcore.settings.Settings.on_this_node`), the archive (turns, cursors, jobs,
write numbers, shard leases) is in PostgreSQL, and the Qdrant Edge directories are under
``shared_vectors_dir``, a path every node sees (no Qdrant server can run here). One client per user
ingests turns into one session in a burst, in order, resending a turn until it is acknowledged; the
worker node holding the most shards is removed while the burst runs and extraction jobs are queued,
and its local directory is wiped. Writes ``OUT.json`` for the test to assert on.
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

from tests.cluster.multinode_scenario import LOOPBACK, MB, SYSTEM_CONFIG, actor_node, restarted, wait_until_spread

SHARDS = 4
PER_SHARD = 2
NAMESPACE = "multinode-pg"
SESSION = "burst"
REMOVE_AT = 48  # acknowledged ingests (all users) before the node goes
AFTER = 3  # acknowledged ingests per user after the moved shards answer again
TURNS_PER_INGEST = 3


def pick_users() -> list[str]:
    from memcore.ids import shard_of
    from memcore.model import UserKey

    users: list[str] = []
    count = dict.fromkeys(range(SHARDS), 0)
    i = 0
    while min(count.values()) < PER_SHARD:
        user, i = f"pg-user-{i}", i + 1
        k = shard_of(UserKey(app="app", user=user), SHARDS)
        if count[k] < PER_SHARD:
            users.append(user)
            count[k] += 1
    return users


USERS = pick_users()


class Ingester:
    """One client per user: ingests ``TURNS_PER_INGEST`` turns at a time into one session, resending the
    same turns (same ids) after a refusal until acknowledged, so the user's turns are sent in order."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.acked: dict[str, list[str]] = {u: [] for u in USERS}  # turn ids, in acknowledged order
        self.refused: list[str] = []
        self.unexpected: list[str] = []
        self.calls = 0

    async def run(self, user: str, stop: asyncio.Event) -> None:
        from memcore.errors import StoreError
        from memcore.model import UserKey

        key, n = UserKey(app="app", user=user), 0
        while not stop.is_set():
            ids = [f"t{n:04d}-{j}" for j in range(TURNS_PER_INGEST)]
            events = [{"id": i, "role": "user", "content": f"{user} turn {i} kiwi"} for i in ids]
            while True:
                try:
                    await self.backend.call(key, "ingest", SESSION, events)
                    break
                except StoreError as exc:  # the shard is moving: not acknowledged, resend the same turns
                    self.refused.append(f"{user}: {str(exc)[:200]}")
                except Exception as exc:  # noqa: BLE001 - reported (the test expects none)
                    self.unexpected.append(f"{user}: {type(exc).__name__}: {str(exc)[:300]}")
                await asyncio.sleep(0.1)
            self.acked[user].extend(ids)
            self.calls += 1
            n += 1
            await asyncio.sleep(0)


def unfinished(archives: list[Any]) -> int:
    return sum(n for a in archives for s, n in a.jobs.counts().items() if s in ("queued", "running"))


async def scenario(cluster: Any, workers: list[Any], nodes: dict[str, Path], work: Path, dsn: str,
                   schema: str) -> dict[str, Any]:
    import ray

    from actors.router import RayShardBackend
    from memcore.ids import shard_of
    from memcore.model import UserKey
    from memcore.settings import Settings
    from memcore.stores.postgres_archive import Owner, PostgresArchive

    out: dict[str, Any] = {}
    settings = Settings(data_dir=work / "not-used-by-shards", shards=SHARDS, namespace=NAMESPACE,
                        shared_vectors_dir=work / "shared-vectors", embedder={"kind": "hashing", "dim": 64},
                        archive={"backend": "postgres", "dsn": dsn, "db_schema": schema},
                        extractor={"queue_size": 10_000, "workers": 1})
    out["user_shards"] = {u: shard_of(UserKey(app="app", user=u), SHARDS) for u in USERS}
    backend = RayShardBackend(settings, read_retry_s=120.0)
    handles = backend.ensure_all()
    await asyncio.gather(*(h.ping.remote() for h in handles))
    placed = {k: actor_node(h) for k, h in enumerate(handles)}
    out["placement_before"] = {k: node for k, (node, _, _) in placed.items()}
    out["node_dirs"] = {n: str(p) for n, p in nodes.items()}
    out["data_dir_before"] = {k: (await backend.call_shard(k, "status"))["data_dir"] for k in range(SHARDS)}
    # the driver reads the archive directly (taking no lease): every user, and each shard's own jobs
    everyone = PostgresArchive(dsn, schema=schema)
    per_shard = [PostgresArchive(dsn, schema=schema, owner=Owner(k, SHARDS)) for k in range(SHARDS)]
    try:
        worker_ids = {w.node_id: w for w in workers}
        by_node: dict[str, list[int]] = {}
        for k, node in out["placement_before"].items():
            by_node.setdefault(node, []).append(k)
        victim = max(worker_ids, key=lambda n: (len(by_node.get(n, [])), n))
        victims = sorted(by_node.get(victim, []))
        out["victim_node"], out["victim_shards"] = victim, victims

        ingester, stop = Ingester(backend), asyncio.Event()
        tasks = [asyncio.create_task(ingester.run(u, stop)) for u in USERS]
        while ingester.calls < REMOVE_AT:
            await asyncio.sleep(0.01)
        out["backlog_at_removal"] = unfinished([per_shard[k] for k in victims])
        out["backlog_all_at_removal"] = unfinished(per_shard)
        t0 = time.monotonic()
        await asyncio.to_thread(cluster.remove_node, worker_ids[victim], False)
        shutil.rmtree(nodes[victim], ignore_errors=True)  # the node's local disk is gone with it
        out["removed_after_s"] = round(time.monotonic() - t0, 2)
        statuses: dict[int, dict[str, Any]] = {}
        answered: dict[int, float] = {}
        for k in victims:
            statuses[k] = await restarted(backend, handles[k], k, placed[k][1], t0)
            answered[k] = round(time.monotonic() - t0, 2)
        recovered = time.monotonic()
        out["answered_s"], out["recovered_s"] = answered, round(recovered - t0, 2)
        at_recovery = {u: len(v) for u, v in ingester.acked.items()}
        while any(len(ingester.acked[u]) < at_recovery[u] + AFTER * TURNS_PER_INGEST for u in USERS):
            if time.monotonic() - t0 > 120:
                raise TimeoutError(f"ingests did not resume: {ingester.refused[-3:]} {ingester.unexpected[-3:]}")
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks)
        drained = time.monotonic()
        while unfinished(per_shard) or everyone.events.oldest_unextracted() is not None:
            if time.monotonic() - drained > 90:
                raise TimeoutError(f"extraction did not drain: {[a.jobs.counts() for a in per_shard]}")
            await asyncio.sleep(0.2)
        out["drained_s"] = round(time.monotonic() - drained, 2)

        placed_after = {k: actor_node(h) for k, h in enumerate(handles)}
        out["placement_after"] = {k: node for k, (node, _, _) in placed_after.items()}
        out["restarts"] = {k: placed_after[k][2] for k in range(SHARDS)}
        out["alive_nodes"] = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        out["victim_status"] = {k: {f: s[f] for f in ("rebuilt_on_start", "lease_epoch", "data_dir")}
                                for k, s in statuses.items()}
        final = {k: await backend.call_shard(k, "status") for k in range(SHARDS)}
        out["final_status"] = {k: {f: s[f] for f in ("lease_epoch", "data_dir", "entries", "keyword_docs")}
                               for k, s in final.items()}
        report: dict[str, dict[str, Any]] = {}
        for u in USERS:
            key = UserKey(app="app", user=u)
            arrived = [e.id for e in everyone.events.arrived(key, SESSION)]
            acked = ingester.acked[u]
            entries = await backend.call(key, "read", 100_000)
            texts = sorted(e.text for e in entries)
            jobs = everyone.jobs.of_session(key, SESSION)
            done = [j for j in jobs if j.status == "done"]
            report[u] = {
                "acked": len(acked), "arrived": len(arrived),
                "lost_events": sorted(set(acked) - set(arrived)),
                "unsent_events": sorted(set(arrived) - set(acked)),
                "order_kept": [i for i in arrived if i in set(acked)] == acked,
                "lost_memories": sorted({f"User: {u} turn {i} kiwi" for i in acked} - set(texts)),
                "extra_memories": sorted(set(texts) - {f"User: {u} turn {i} kiwi" for i in arrived}),
                "entries": len(entries), "distinct_texts": len(set(texts)),
                "rewritten": sum(1 for e in entries if e.updated_at != e.created_at),
                "job_statuses": sorted({j.status for j in jobs}),
                "last_job_done": bool(jobs) and jobs[-1].status in ("done", "skipped"),
                "retried_jobs": sum(1 for j in jobs if j.attempts > 1),
                "not_done": [(j.status, j.reason_code, "; ".join([j.reason or "", *j.errors[:2]])[:600])
                             for j in jobs if j.status != "done"],
                "jobs_in_order": [j.seq for j in sorted(done, key=lambda j: (j.finished_at, j.seq))]
                == [j.seq for j in done],
            }
        out["users"] = report
        out["refused"] = len(ingester.refused)
        out["refused_samples"] = ingester.refused[:3]
        out["unexpected"] = ingester.unexpected[:5]
        out["sqlite_files"] = [str(p) for n in nodes.values() for p in n.rglob("*.sqlite3")]
        out["vectors_on_node_disks"] = [str(p) for n in nodes.values() for p in n.rglob("vectors")]
        return out
    finally:
        everyone.close()
        for a in per_shard:
            a.close()


def main() -> int:
    out_path, work, dsn, schema = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    import ray
    from ray.cluster_utils import Cluster

    from memcore.settings import NODE_DATA_DIR_ENV

    t0 = time.monotonic()
    result: dict[str, Any] = {}
    node = {"num_cpus": 1, "object_store_memory": 80 * MB, "node_ip_address": LOOPBACK}
    head_dir = work / "node-head"
    cluster = Cluster(initialize_head=True, head_node_args={
        **node, "include_dashboard": False, "_system_config": SYSTEM_CONFIG,
        "env_vars": {NODE_DATA_DIR_ENV: str(head_dir)}})
    try:
        dirs = [work / f"node-{i}" for i in range(3)]
        workers = [cluster.add_node(**node, env_vars={NODE_DATA_DIR_ENV: str(d)}) for d in dirs]
        cluster.wait_for_nodes()
        nodes = {cluster.head_node.node_id: head_dir, **{w.node_id: d for w, d in zip(workers, dirs, strict=True)}}
        ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False,
                 _node_ip_address=LOOPBACK)
        wait_until_spread(1 + len(workers))
        result["started_s"] = round(time.monotonic() - t0, 2)
        result.update(asyncio.run(scenario(cluster, workers, nodes, work, dsn, schema)))
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
