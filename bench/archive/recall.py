"""Session recall (``EventRepository.search``) on LoCoMo: the SQLite engine (FTS5 BM25) vs the PostgreSQL
engine (BM25 in SQL over the same tokens), on the same archived turns and questions.

    python -m bench.archive.recall [--data locomo10.json] [--dsn postgresql://...] [--out RESULT.json]

Every LoCoMo conversation is one user of one archive (all ten users in one SQLite file, as in one shard;
in one PostgreSQL schema); every question with evidence is one search of its user's turns with the
question text, top 10 turns. Scoring is :func:`bench.retrieval.recall.score` (a turn's provenance is its
own id): session and turn recall @1/5/10 and nDCG@10 over categories 1-4, with percentile bootstrap 95 %
intervals (questions resampled), the paired difference PostgreSQL - SQLite with its own interval, the
share of questions whose top 10 are the same turns in the same order, and search latency p50/p99.

Without ``--dsn`` a private PostgreSQL server is started (:mod:`testkit.postgres`: needs root and the
``postgres`` user). RESULT.json defaults to ``bench/results/archive_recall.json``.
LoCoMo-10 is CC BY-NC 4.0: evaluation use only.
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

from bench.harness.locomo import APP, LOCOMO, Conversation, events, load
from bench.retrieval.recall import MAIN_CATEGORIES, bootstrap_ci, mean_metrics, score
from memcore.archive_ports import EventArchive
from memcore.model import UserKey

K = 10
HEADLINE = ("session_recall_any@1", "session_recall_any@5", "turn_recall_any@5", "turn_recall_all@10", "ndcg@10")


def ingest(archive: EventArchive, conversations: Sequence[Conversation]) -> float:
    t0 = time.perf_counter()
    for conv in conversations:
        key = UserKey(app=APP, user=conv.user)
        for session in conv.sessions:
            archive.events.append(key, session.key, events(session))
    return time.perf_counter() - t0


def run_queries(archive: EventArchive,
                conversations: Sequence[Conversation]) -> tuple[list[dict[str, Any]], list[float]]:
    rows: list[dict[str, Any]] = []
    latency: list[float] = []
    for conv in conversations:
        key = UserKey(app=APP, user=conv.user)
        for qa in conv.questions:
            if not qa.evidence:
                continue
            t0 = time.perf_counter()
            hits = archive.events.search(key, qa.question, limit=K)
            latency.append((time.perf_counter() - t0) * 1000)
            ids = [h.event_id for h in hits]
            rows.append({"category": qa.category, "ids": ids,
                         "metrics": score([[i] for i in ids], [h.content for h in hits], qa.evidence)})
    return rows, latency


def summary(rows: list[dict[str, Any]], latency: list[float], ingest_s: float) -> dict[str, Any]:
    main = [r["metrics"] for r in rows if r["category"] in MAIN_CATEGORIES]
    return {"overall": {k: v for k, v in mean_metrics(main).items() if k == "n" or k in HEADLINE or "@" in k},
            "ci95": bootstrap_ci(main, HEADLINE),
            "latency_ms": {"p50": round(float(np.percentile(latency, 50)), 3),
                           "p99": round(float(np.percentile(latency, 99)), 3)},
            "ingest_s": round(ingest_s, 2)}


def paired(lite: list[dict[str, Any]], pg: list[dict[str, Any]], n: int = 2000, seed: int = 16) -> dict[str, Any]:
    """PostgreSQL - SQLite per question (categories 1-4): the mean difference and its bootstrap 95 % interval."""
    idx = [i for i, r in enumerate(lite) if r["category"] in MAIN_CATEGORIES]
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for key in HEADLINE:
        d = np.array([pg[i]["metrics"][key] - lite[i]["metrics"][key] for i in idx])
        boots = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
        out[key] = {"mean": round(float(d.mean()), 4),
                    "ci95": [round(float(np.percentile(boots, 2.5)), 4), round(float(np.percentile(boots, 97.5)), 4)]}
    same = sum(lite[i]["ids"] == pg[i]["ids"] for i in idx)
    out["same_top10"] = round(same / len(idx), 4)
    out["same_top10_as_sets"] = round(sum(set(lite[i]["ids"]) == set(pg[i]["ids"]) for i in idx) / len(idx), 4)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.archive.recall", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=LOCOMO)
    p.add_argument("--dsn", default=None, help="a PostgreSQL to use (default: start a private one)")
    p.add_argument("--out", type=Path, default=Path("bench/results/archive_recall.json"))
    p.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    args = p.parse_args(argv)

    from memcore.stores.postgres_archive import PostgresArchive
    from memcore.stores.sqlite_archive import SqliteArchive

    conversations = load(args.data, limit=args.limit)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        dsn = args.dsn
        if dsn is None:
            from testkit.postgres import PostgresServer

            dsn = stack.enter_context(PostgresServer()).dsn
        lite = SqliteArchive(tmp / "archive.sqlite3", tmp / "seq.sqlite3")
        stack.callback(lite.close)
        pg = PostgresArchive(dsn, schema=f"bench_recall_{int(time.time())}")
        stack.callback(pg.close)
        results: dict[str, Any] = {}
        rows: dict[str, list[dict[str, Any]]] = {}
        for name, archive in (("sqlite", lite), ("postgres", pg)):
            took = ingest(archive, conversations)
            rows[name], latency = run_queries(archive, conversations)
            results[name] = summary(rows[name], latency, took)
    out = {"bench": "archive_recall", "data": str(args.data.name), "conversations": len(conversations),
           "turns": sum(len(s.turns) for c in conversations for s in c.sessions), "k": K,
           "engines": results, "postgres_minus_sqlite": paired(rows["sqlite"], rows["postgres"])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
