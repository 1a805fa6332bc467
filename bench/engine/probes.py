"""Probes behind the engine benchmark's findings (where the time goes; what a change would save).

    python -m bench.engine.probes [--entries 100000] [--out bench/results/engine_probes.json]

1. wal: does an update that Qdrant Edge acknowledged, but that was never flushed, survive SIGKILL?
2. add: MemoryService.add latency with the edge store as shipped (flush after every write) and with
   the flush left to close (a subclass, memcore untouched), side by side, adds alternating; the
   keyword index as shipped in both.
3. dense: the edge query of a hybrid search's candidate pool (100) with payloads + Entry parsing
   (as shipped) against ids only, plus retrieve() of the 10 survivors, for users of several sizes.
4. threads: one-query embedding latency with torch at 1 and 2 intra-op threads (alternating blocks).
Uses the engine benchmark's cached vectors (run ``python -m bench.engine`` first). Measured on a shared machine:
the load average is recorded with each probe.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.run import user_key
from bench.harness.cli import parser
from bench.harness.datasets import embed_cached, memory_dataset, memory_texts
from bench.harness.locomo import load_locomo
from bench.harness.report import ROOT, load_average, machine_info, write_json
from bench.harness.timing import percentiles, time_calls

DIM = 384


def wal_probe() -> dict[str, Any]:
    if len(sys.argv) > 2 and sys.argv[1] == "--wal-child":
        import qdrant_edge as qe

        cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=8, distance=qe.Distance.Cosine))
        shard = qe.EdgeShard.create(sys.argv[2], cfg)
        rng = np.random.default_rng(0)
        shard.update(qe.UpdateOperation.upsert_points([qe.Point(i, rng.random(8).tolist(), {}) for i in range(100)]))
        shard.flush()
        for i in range(100, 110):  # acknowledged, never flushed
            shard.update(qe.UpdateOperation.upsert_points([qe.Point(i, rng.random(8).tolist(), {"late": True})]))
        os.kill(os.getpid(), signal.SIGKILL)
    import qdrant_edge as qe

    with tempfile.TemporaryDirectory() as tmp:
        rc = subprocess.run([sys.executable, "-m", "bench.engine.probes", "--wal-child", tmp], cwd=ROOT,
                            check=False).returncode
        cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=8, distance=qe.Distance.Cosine))
        shard = qe.EdgeShard.load(tmp, cfg)
        count = int(shard.count(qe.CountRequest(exact=True)))
        shard.close()
    return {"child_exit": rc, "flushed": 100, "unflushed_acknowledged": 10, "points_after_reopen": count}


def add_probe(n: int, vecs: np.ndarray, mems: list, user_of: np.ndarray, adds: int) -> dict[str, Any]:
    """Two services side by side (same data), single adds alternating between them."""
    from memcore.service import MemoryService
    from memcore.stores.embedders import HashingEmbedder
    from memcore.stores.qdrant_edge import QdrantEdgeStore
    from memcore.stores.tantivy_index import TantivyIndex

    class NoFlushEdge(QdrantEdgeStore):
        def _apply(self, what: str, operations: Any) -> None:  # as shipped, minus the flush per call
            with self._engine(what) as shard:
                for op in operations:
                    shard.update(op)

    variants = {"flush_every_write": QdrantEdgeStore, "flush_on_close": NoFlushEdge}
    with tempfile.TemporaryDirectory() as tmp:
        svcs = {name: MemoryService(cls(Path(tmp) / name / "v", DIM), TantivyIndex(Path(tmp) / name / "k"),
                                    HashingEmbedder(DIM)) for name, cls in variants.items()}
        for u in np.unique(user_of[:n]):
            rows = np.flatnonzero(user_of[:n] == u)
            for svc in svcs.values():
                svc.add_many(user_key(int(u)), [mems[i] for i in rows], vectors=vecs[rows])
        items = [(name, user_key(int(user_of[i])), {"text": f"probe {i}: " + mems[i]["text"]}, vecs[i][None])
                 for i in range(adds) for name in variants]
        times = time_calls(lambda it: svcs[it[0]].add(it[1], it[2], vector=it[3]), items, warmup=10)
        out: dict[str, Any] = {name: percentiles(times[k :: len(variants)]) for k, name in enumerate(variants)}
        out["load_average"] = load_average()
        for svc in svcs.values():
            svc.vectors.close()
            svc.keywords.close()
    return out


def dense_probe(vecs: np.ndarray, mems: list, user_of: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    """The hybrid candidate pool (limit 100) with payloads and parsing vs ids only + retrieve of 10."""
    import qdrant_edge as qe

    from memcore.fields import now_utc
    from memcore.ids import memory_id, point_id
    from memcore.model import Entry, Memory
    from memcore.stores.qdrant_common import from_payload, scope_filter
    from memcore.stores.qdrant_edge import QdrantEdgeStore, edge_filter

    now = now_utc()
    counts = np.bincount(user_of)
    with tempfile.TemporaryDirectory() as tmp:
        store = QdrantEdgeStore(Path(tmp) / "v", DIM)
        shard = store._shard
        assert shard is not None
        for lo in range(0, len(mems), 2000):
            pts = []
            for i in range(lo, min(lo + 2000, len(mems))):
                key, mem = user_key(int(user_of[i])), Memory.model_validate(mems[i])
                mid = memory_id(key, mem)
                e = Entry(id=mid, app=key.app, user=key.user, created_at=now, updated_at=now, **mem.model_dump())
                pts.append(qe.Point(point_id(mid), vecs[i].tolist(), e.to_payload()))
            shard.update(qe.UpdateOperation.upsert_points(pts))
        shard.flush()
        out: dict[str, Any] = {"points": len(mems)}
        order = np.argsort(counts)
        picks = {"median_user": int(order[len(order) // 2]), "p99_user": int(order[int(len(order) * 0.99)]),
                 "largest_user": int(order[-1])}
        for label, u in picks.items():
            key = user_key(u)
            flt = edge_filter(scope_filter(key, active_only=True))

            def with_payload(j: int, flt: Any = flt) -> list:
                req = qe.QueryRequest(limit=100, query=qe.Query.Nearest(queries[j].tolist()), filter=flt,
                                      with_payload=True, with_vector=False)
                return [from_payload(p.payload) for p in shard.query(req)]

            def ids_then_10(j: int, flt: Any = flt) -> list:
                req = qe.QueryRequest(limit=100, query=qe.Query.Nearest(queries[j].tolist()), filter=flt,
                                      with_payload=False, with_vector=False)
                ids = [p.id for p in shard.query(req)]
                return [from_payload(r.payload) for r in shard.retrieve(ids[:10], True, False)]

            both = time_calls(lambda p: p[1](p[0]), [(j, f) for j in range(len(queries))
                                                    for f in (with_payload, ids_then_10)], warmup=20)
            out[label] = {"entries": int(counts[u]), "pool100_with_payload_parse": percentiles(both[0::2]),
                          "pool100_ids_then_retrieve10": percentiles(both[1::2]), "load_average": load_average()}
        store.close()
    return out


def threads_probe(texts: list[str], block: int = 25) -> dict[str, Any]:
    """Blocks of ``block`` queries at 1 and at 2 torch threads, alternating; a block's first call untimed."""
    import torch

    from memcore.stores.embedders import MiniLMEmbedder

    emb = MiniLMEmbedder()
    times: dict[int, list[float]] = {1: [], 2: []}
    for lo in range(0, len(texts), block):
        for k in (1, 2):
            torch.set_num_threads(k)
            times[k] += time_calls(lambda t: emb.embed_queries([t]), texts[lo : lo + block], warmup=1)
    return {f"threads_{k}": percentiles(v) for k, v in times.items()} | {"load_average": load_average()}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--wal-child":
        wal_probe()
    ap = parser("bench.engine.probes", __doc__)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--add-entries", type=int, default=10_000, help="store size for the add probe")
    ap.add_argument("--adds", type=int, default=100)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--probes", nargs="+", default=["wal", "add", "dense", "threads"])
    ap.add_argument("--out", type=Path, default=Path("bench/results/engine_probes.json"))
    args = ap.parse_args()
    texts, base = memory_texts(args.entries, args.seed)
    def no_embedding(_: list[str]) -> np.ndarray:
        raise SystemExit("no cached vectors for these entries: run python -m bench.engine first")

    def texts_for(n: int) -> list[str]:
        return texts[:n] if n <= len(texts) else memory_texts(n, args.seed)[0]

    vecs, _ = embed_cached(f"minilm_s{args.seed}", texts_for, args.entries, no_embedding)
    mems, user_of = memory_dataset(texts, base, args.seed, 1000)
    res: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    res |= {"machine": machine_info(), "config": {k: str(v) for k, v in vars(args).items()}}
    if "wal" in args.probes:
        res["wal"] = wal_probe()
        print("wal", res["wal"], flush=True)
    if "add" in args.probes:
        res["add"] = add_probe(args.add_entries, vecs, mems, user_of, args.adds)
        print("add", res["add"], flush=True)
    questions = [q.question for q in load_locomo()[1]][: args.queries]
    if "dense" in args.probes:
        rng = np.random.default_rng(args.seed)
        qv = vecs[rng.integers(len(vecs), size=args.queries)]  # stand-in query vectors (unit, same model)
        res["dense"] = dense_probe(vecs, mems, user_of, qv)
        print("dense", res["dense"], flush=True)
    if "threads" in args.probes:
        res["threads"] = threads_probe(questions)
        print("threads", res["threads"], flush=True)
    write_json(args.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
