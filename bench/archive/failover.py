"""Shard failover time with node-local disks and the archive in PostgreSQL: the multi-node scenario of
``tests/cluster/test_multinode_postgres.py`` (:mod:`tests.cluster.multinode_pg_scenario`, run as a
subprocess: a simulated Ray cluster of a head and three worker raylets, one CPU each; a worker node
removed in the middle of an ingest burst with extraction jobs queued, its directory wiped), repeated.

    python -m bench.archive.failover [--runs 2] [--dsn postgresql://...] [--out RESULT.json]

Per run: seconds from the node's removal until each moved shard answers again (``answered_s``, one
value per moved shard; Ray's health check there notices a dead raylet in about 3 s), until the last
answers (``recovered_s``), and from the end of the burst until the extraction backlog drained; the
refused (503) ingests meanwhile, and the backlog at the removal. Summary: median and min–max over every
moved shard of every run. Writes ``bench/results/archive_failover.json`` with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.report import load_average, machine_info, write_json

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("answered_s", "recovered_s", "drained_s", "removed_after_s", "backlog_at_removal", "refused", "wall_s")


def one_run(dsn: str, schema: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="failover"))
    ray_tmp = tempfile.mkdtemp(prefix="fo", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    try:
        subprocess.run([sys.executable, "-m", "tests.cluster.multinode_pg_scenario", str(work / "out.json"),
                        str(work), dsn, schema], cwd=ROOT, env=env, check=True, timeout=300, capture_output=True)
        data = json.loads((work / "out.json").read_text())
        return {f: data[f] for f in FIELDS}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.archive.failover", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--dsn", default=None, help="a PostgreSQL to use (default: start a private one)")
    p.add_argument("--out", type=Path, default=Path("bench/results/archive_failover.json"))
    args = p.parse_args(argv)
    out: dict[str, Any] = {"bench": "archive_failover", "machine": machine_info(), "load_before": load_average()}
    with ExitStack() as stack:
        dsn = args.dsn
        if dsn is None:
            from testkit.postgres import PostgresServer

            dsn = stack.enter_context(PostgresServer()).dsn
        runs = [one_run(dsn, f"bench_failover_{int(time.time())}_{i}") for i in range(args.runs)]
    answered = [v for r in runs for v in r["answered_s"].values()]
    out.update(runs=runs, load_after=load_average(), summary={
        "moved_shards": len(answered),
        "answer_again_s": {"median": round(float(np.median(answered)), 2), "min": min(answered), "max": max(answered)},
        "drained_s": {"median": round(float(np.median([r["drained_s"] for r in runs])), 2),
                      "min": min(r["drained_s"] for r in runs), "max": max(r["drained_s"] for r in runs)},
    })
    write_json(args.out, out)
    print(json.dumps(out["summary"]))
    return out


if __name__ == "__main__":
    main()
