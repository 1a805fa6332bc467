"""Ingest throughput and session-recall latency of one shard, event archive on SQLite vs PostgreSQL.

    python -m bench.archive.ingest [--conversations 2] [--dsn postgresql://...] [--out RESULT.json]

One :class:`actors.shard.ShardCore` per engine (Qdrant Edge and Tantivy on a temp dir, the hashing
embedder, the verbatim extractor with one worker, as ``./scripts/run`` without a model): the LoCoMo
conversations' turns are ingested the way an agent sends them, one ``ingest`` call per turn with that
turn only. Measured: accepted events/s (the ingest calls; the archive write, the job row and the queue),
then events/s until every turn is extracted (the extraction backlog drained), and ``recall`` latency
(p50 / p99) over the conversations' questions. The engines run in turns, ``--rounds`` times each, on
fresh shards (the machine is shared: a stall of the disk or the CPU hits one round, not one engine).
Intervals: each round's ingest is cut into 8 equal slices; the median slice rate (robust to a stall)
and the mean have bootstrap 95 % intervals over the slices of every round; latency percentiles are
bootstrapped over the searches of every round. Writes JSON and a PNG next to it
(``bench/results/archive_ingest.*``) with the load average before and after. Without ``--dsn`` a
private PostgreSQL is started (:mod:`testkit.postgres`). LoCoMo-10 is CC BY-NC 4.0: evaluation use only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.locomo import APP, LOCOMO, Conversation, load
from bench.harness.report import load_average, machine_info, plot_style, write_json
from memcore.model import UserKey

SLICES = 8
BOOT = 2000


def boot_ci(values: Sequence[float], stat: Any, seed: int = 22) -> list[float]:
    arr = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boots = [stat(arr[rng.integers(0, len(arr), len(arr))]) for _ in range(BOOT)]
    return [round(float(np.percentile(boots, 2.5)), 3), round(float(np.percentile(boots, 97.5)), 3)]


def turns(conversations: Sequence[Conversation]) -> list[tuple[UserKey, str, dict[str, Any]]]:
    out = []
    for conv in conversations:
        key = UserKey(app=APP, user=conv.user)
        for session in conv.sessions:
            for t in session.turns:
                out.append((key, session.key, {"id": t.id, "role": t.role, "content": t.text,
                                               "timestamp": t.timestamp.isoformat()}))
    return out


def run_round(core: Any, conversations: Sequence[Conversation]) -> dict[str, Any]:
    calls = turns(conversations)
    slice_rates: list[float] = []
    per = max(1, len(calls) // SLICES)
    t_all = time.perf_counter()
    for s in range(0, len(calls), per):
        part = calls[s:s + per]
        t0 = time.perf_counter()
        for key, session, event in part:
            core.ingest(key, session, [event])
        slice_rates.append(len(part) / (time.perf_counter() - t0))
    accepted_s = time.perf_counter() - t_all
    while core.archive.events.oldest_unextracted() is not None or core.jobs.status()["queued"]:
        time.sleep(0.05)
    extracted_s = time.perf_counter() - t_all
    latency: list[float] = []
    for conv in conversations:
        key = UserKey(app=APP, user=conv.user)
        for qa in conv.questions:
            t0 = time.perf_counter()
            core.recall(key, qa.question, None, 10)
            latency.append((time.perf_counter() - t0) * 1000)
    return {"events": len(calls), "accepted_s": accepted_s, "extracted_s": extracted_s, "slice_rates": slice_rates,
            "latency": latency}


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r for x in rounds for r in x["slice_rates"]]
    latency = [v for x in rounds for v in x["latency"]]
    events = sum(x["events"] for x in rounds)
    return {
        "rounds": len(rounds), "events": events,
        "accepted_events_per_s": round(float(np.median(rates)), 1),
        "accepted_ci95": boot_ci(rates, np.median),
        "accepted_mean_events_per_s": round(float(np.mean(rates)), 1),
        "accepted_mean_ci95": boot_ci(rates, np.mean),
        "accepted_overall_events_per_s": [round(x["events"] / x["accepted_s"], 1) for x in rounds],
        "extracted_events_per_s": [round(x["events"] / x["extracted_s"], 1) for x in rounds],
        "recall_ms": {"n": len(latency), "p50": round(float(np.percentile(latency, 50)), 3),
                      "p50_ci95": boot_ci(latency, lambda a: np.percentile(a, 50)),
                      "p99": round(float(np.percentile(latency, 99)), 3),
                      "p99_ci95": boot_ci(latency, lambda a: np.percentile(a, 99))},
    }


def plot(out: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    names = list(out["engines"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    rates = [out["engines"][n]["accepted_events_per_s"] for n in names]
    errs = [[r - out["engines"][n]["accepted_ci95"][0] for n, r in zip(names, rates, strict=True)],
            [out["engines"][n]["accepted_ci95"][1] - r for n, r in zip(names, rates, strict=True)]]
    a.bar(names, rates, yerr=errs, capsize=4, color=["#4c72b0", "#dd8452"])
    a.set_title("ingest accepted, median events/s (95 % CI)")
    for i, n in enumerate(names):
        r = out["engines"][n]["recall_ms"]
        b.errorbar([i - 0.1], [r["p50"]], yerr=[[r["p50"] - r["p50_ci95"][0]], [r["p50_ci95"][1] - r["p50"]]],
                   fmt="o", capsize=4, label="p50" if i == 0 else None, color="#4c72b0")
        b.errorbar([i + 0.1], [r["p99"]], yerr=[[r["p99"] - r["p99_ci95"][0]], [r["p99_ci95"][1] - r["p99"]]],
                   fmt="s", capsize=4, label="p99" if i == 0 else None, color="#dd8452")
    b.set_xticks(range(len(names)), names)
    b.set_yscale("log")
    b.set_title("session recall, ms")
    b.legend()
    fig.suptitle(f"one shard, {out['conversations']} LoCoMo conversations, load avg {out['load_before'][0]}")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.archive.ingest", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=LOCOMO)
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dsn", default=None, help="a PostgreSQL to use (default: start a private one)")
    p.add_argument("--out", type=Path, default=Path("bench/results/archive_ingest.json"))
    args = p.parse_args(argv)

    from actors.shard import ShardCore
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder

    conversations = load(args.data, limit=args.conversations)
    out: dict[str, Any] = {"bench": "archive_ingest", "machine": machine_info(), "load_before": load_average(),
                           "conversations": len(conversations), "engines": {}}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        dsn = args.dsn
        if dsn is None:
            from testkit.postgres import PostgresServer

            dsn = stack.enter_context(PostgresServer()).dsn
        archives = {"sqlite": {"backend": "sqlite"},
                    "postgres": {"backend": "postgres", "dsn": dsn, "db_schema": f"bench_ingest_{int(time.time())}"}}
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in archives}
        for r in range(args.rounds):
            for name, archive in archives.items():
                if name == "postgres":
                    archive = {**archive, "db_schema": f"{archive['db_schema']}_{r}"}
                settings = Settings.model_validate({"data_dir": tmp / f"{name}{r}", "shards": 1, "archive": archive,
                                                    "embedder": {"kind": "hashing", "dim": 256},
                                                    "extractor": {"queue_size": 100_000}})
                core = ShardCore(settings, 0, HashingEmbedder(256))
                try:
                    rounds[name].append(run_round(core, conversations))
                finally:
                    core.close()
        out["engines"] = {name: summarise(rs) for name, rs in rounds.items()}
    out["load_after"] = load_average()
    write_json(args.out, out)
    plot(out, args.out.with_suffix(".png"))
    print(json.dumps(out["engines"]))
    return out


if __name__ == "__main__":
    main()
