"""Engine benchmark: add throughput and search latency of MemoryService per vector-store adapter.

    python -m bench.engine --sizes 10000 100000 --users 1000 --out bench/results/engine.json
    python -m bench.engine --sizes 2000 --queries 50            # quick run

Data: LoCoMo-10 turns ("Speaker: text", evaluation use only) spread over ``--users`` users of app
"bench" (log-normal weights); past the 5,882 unique turns each text is a turn plus a sentence of
another turn (distinct, deterministic, prefix-stable: the 10k set is the first 10k of the 100k set).
~10 % are episodes with the session's time. Queries: LoCoMo questions, each aimed at a random user
that has entries. Vectors: all-MiniLM-L6-v2 (``MiniLMEmbedder``, CPU torch; not the settings'
default, paraphrase-MiniLM-L3), embedded once, cached in bench/results/cache/. Search timings use
a precomputed query vector (embedding is reported apart), except "hybrid_e2e", which embeds the
query inside MemoryService.search as a caller would.
Adapters: "edge" = Qdrant Edge on a temp dir (the embedded default); "client_local" = qdrant-client
``QdrantClient(":memory:")``, the server-API adapter on the client's local mode (pure-Python brute
force, NOT a Qdrant server), capped by --client-max-size / --client-queries because it is slow.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.report import MODES, POOL_NOTE, evaluate, markdown, plot, pp
from bench.harness.cli import parser
from bench.harness.datasets import embed_cached, memory_dataset, memory_texts
from bench.harness.locomo import load_locomo
from bench.harness.report import load_average, machine_info, write_json
from bench.harness.timing import Stopwatch, instrumented, percentiles, profile_top, time_calls

APP = "bench"


def user_key(u: int) -> Any:
    from memcore.model import UserKey

    return UserKey(app=APP, user=f"u{u:04d}")


# ----------------------------------------------------------------------------- measurements
def make_service(adapter: str, tmp: Path, embedder: Any) -> Any:
    from memcore.service import MemoryService
    from memcore.stores.tantivy_index import TantivyIndex

    if adapter == "edge":
        from memcore.stores.qdrant_edge import QdrantEdgeStore

        vectors: Any = QdrantEdgeStore(tmp / "vectors", embedder.dim)
    else:
        from qdrant_client import QdrantClient

        from memcore.stores.qdrant import QdrantServerStore

        vectors = QdrantServerStore(QdrantClient(":memory:"), "bench", embedder.dim)
    return MemoryService(vectors, TantivyIndex(tmp / "keywords"), embedder)


def load(svc: Any, mems: list, user_of: np.ndarray, vecs: np.ndarray, batch: int) -> dict[str, Any]:
    """Per-user ``add_many`` batches (at most ``batch`` each), vectors given; end to end incl. keywords."""
    rows: dict[int, list[int]] = defaultdict(list)
    for i, u in enumerate(user_of.tolist()):
        rows[u].append(i)
    batches = [(u, idx[lo : lo + batch]) for u, idx in rows.items() for lo in range(0, len(idx), batch)]
    sw = {k: Stopwatch() for k in ("vector_get", "vector_upsert", "keyword_upsert")}
    parts = [(svc.vectors, "get", sw["vector_get"]), (svc.vectors, "upsert", sw["vector_upsert"]),
             (svc.keywords, "upsert", sw["keyword_upsert"])]
    t0 = time.perf_counter()
    with instrumented(parts):  # ~1 us per wrapped call, against calls of milliseconds
        calls = time_calls(lambda b: svc.add_many(user_key(b[0]), [mems[i] for i in b[1]], vectors=vecs[b[1]]),
                           batches)
    secs = time.perf_counter() - t0
    split = {k: round(v.seconds, 2) for k, v in sw.items()}
    split["other"] = round(secs - sum(split.values()), 2)
    return {"entries": len(mems), "seconds": round(secs, 2), "entries_per_s": round(len(mems) / secs, 1),
            "seconds_by_part": split, "add_many_calls": len(calls), "add_many_call_ms": percentiles(calls),
            "load_average": load_average()}


def search_modes(svc: Any, queries: list, qvecs: np.ndarray, modes: tuple, warmup: int,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """p50/p99 per mode; the modes take turns query by query so that all of them see the same machine load.

    The engine modes (and ``extra``: named callables of j) run in one pass; "hybrid_e2e" runs in a
    second pass, interleaved with "query_embed" (the embedding alone), so that torch's worker threads,
    still spinning after an embedding, do not land on the engine-only timings.
    """
    pool = svc.config.candidate_pool if svc is not None else 0
    fns = {
        "vector": lambda j: svc.search(queries[j][1], {"query": queries[j][0], "hybrid": False}, query_vector=qvecs[j]),
        "keyword": lambda j: svc.keywords.search(queries[j][1], queries[j][0], limit=pool),
        "hybrid": lambda j: svc.search(queries[j][1], {"query": queries[j][0]}, query_vector=qvecs[j]),
        "query_embed": lambda j: svc.embedder.embed_queries([queries[j][0]]),
        "hybrid_e2e": lambda j: svc.search(queries[j][1], {"query": queries[j][0]}),
    } | (extra or {})
    out: dict[str, Any] = {}
    engine = [m for m in modes if m != "hybrid_e2e"] + list(extra or {})
    for names in (engine, ["query_embed", "hybrid_e2e"] if "hybrid_e2e" in modes else []):
        if names:
            times = time_calls(lambda p: fns[p[1]](p[0]), [(j, m) for j in range(len(queries)) for m in names],
                               warmup=warmup * len(names))
            out |= {m: percentiles(times[i :: len(names)]) for i, m in enumerate(names)}
    out["load_average"] = load_average()
    return out


def breakdown(svc: Any, queries: list, qvecs: np.ndarray) -> dict[str, Any]:
    """Where a hybrid search's time goes: the store calls of _search_once timed from the outside, then cProfile."""
    import memcore.stores.qdrant_edge as qedge
    from memcore.stores.edge_tiers import TieredEdgeStore

    names = ("vector_search", "payload_parse", "keyword_search", "entry_fetch", "total")
    sw = {k: Stopwatch() for k in names}
    fetched: list[int] = []
    fetch = "get_points"  # the hybrid search fuses point ids, then fetches the entries of the hits it returns
    get = getattr(svc.vectors, fetch)

    def counted_get(key: Any, ids: Any) -> Any:
        fetched.append(len(ids))
        return get(key, ids)

    setattr(svc.vectors, fetch, counted_get)
    targets = [(svc.vectors, "search_points", sw["vector_search"]), (svc.keywords, "search", sw["keyword_search"]),
               (svc.vectors, fetch, sw["entry_fetch"]), (svc, "search", sw["total"])]
    if isinstance(svc.vectors, qedge.QdrantEdgeStore | TieredEdgeStore):  # Entry parsing inside the edge stores
        targets.append((qedge, "from_payload", sw["payload_parse"]))
    try:
        with instrumented(targets):
            for j, (q, key) in enumerate(queries):
                svc.search(key, {"query": q}, query_vector=qvecs[j])
    finally:
        delattr(svc.vectors, fetch)
    ms = {k: round(s.seconds / len(queries) * 1e3, 3) for k, s in sw.items()}
    ms["fusion_hits_other"] = round(ms["total"] - ms["vector_search"] - ms["keyword_search"] - ms["entry_fetch"], 3)
    prof = profile_top(lambda j: svc.search(queries[j][1], {"query": queries[j][0]}, query_vector=qvecs[j]),
                       range(len(queries)))
    return {"mean_ms_per_query": ms, "entries_fetched_per_query": round(sum(fetched) / len(queries), 1),
            "note": "vector_search: the dense list, point ids and cosines (no payload); entry_fetch: the entries of "
                    "the hits returned; payload_parse = Entry.model_validate of each point fetched (in entry_fetch)",
            "profile": prof}


def topk(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first (exact; argpartition then sort)."""
    kk = min(k, len(scores))
    if kk <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, kk - 1)[:kk]
    return part[np.argsort(-scores[part])]


def floor_fns(vecs: np.ndarray, user_of: np.ndarray, uidx: list[int], qvecs: np.ndarray, k: int) -> dict:
    """Exact brute-force top-k (float32 matmul): over the user's rows (pre-grouped), or the full matrix masked."""
    groups = {u: np.ascontiguousarray(vecs[user_of == u]) for u in set(uidx)}
    return {"floor_user_rows": lambda j: topk(groups[uidx[j]] @ qvecs[j], k),
            "floor_full_scan": lambda j: topk(np.where(user_of == uidx[j], vecs @ qvecs[j], -np.inf), k)}


def add_single(svc: Any, texts: list[str], vecs: np.ndarray, users: int, seed: int) -> dict[str, Any]:
    """``MemoryService.add`` of one new entry at a time, vector given (borrowed from a stored row)."""
    rng = np.random.default_rng(seed + 9)
    items = [(user_key(int(rng.integers(users))), {"text": t}, vecs[int(rng.integers(len(vecs)))][None, :])
             for t in texts]
    add = lambda it: svc.add(it[0], it[1], vector=it[2])  # noqa: E731
    out: dict[str, Any] = {**percentiles(time_calls(add, items[5:-30], warmup=0))}
    out["profile"] = profile_top(add, items[-30:], top=12)  # 30 more adds, profiled (not in the timings)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = parser(__name__, __doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=300, help="timed queries per mode, after --warmup untimed ones")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--embed-queries", type=int, default=200, help="single queries timed through the embedder")
    ap.add_argument("--adds", type=int, default=100, help="single adds timed per size (edge)")
    ap.add_argument("--adapters", nargs="+", default=["edge", "client_local"], choices=["edge", "client_local"])
    ap.add_argument("--client-max-size", type=int, default=10_000, help="largest size run on client_local")
    ap.add_argument("--client-queries", type=int, default=200, help="most timed queries per mode on client_local")
    ap.add_argument("--batch", type=int, default=128, help="embedding batch (passages)")
    ap.add_argument("--add-batch", type=int, default=256, help="most memories per add_many call")
    ap.add_argument("--sigma", type=float, default=0.8, help="log-normal spread of entries over users")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the embedder (default: torch's)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/engine.json"))
    args = ap.parse_args(argv)
    log = lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)  # noqa: E731
    warnings.filterwarnings("ignore", message=".*Local mode is not recommended.*")
    import torch

    from memcore.stores.embedders import MiniLMEmbedder

    machine, sizes = machine_info(), sorted(set(args.sizes))
    embedder = MiniLMEmbedder(batch_size=args.batch, threads=args.threads)
    texts, base = memory_texts(max(sizes) + args.adds + 35, args.seed)
    texts_for = lambda n: texts[:n] if n <= len(texts) else memory_texts(n, args.seed)[0]  # noqa: E731
    vecs_all, meta = embed_cached(f"minilm_s{args.seed}", texts_for, max(sizes), embedder.embed_passages, log)
    mems_all, users_all = memory_dataset(texts, base, args.seed, args.users, args.sigma)
    sample = texts[:1024]
    t0 = time.perf_counter()
    embedder.embed_passages(sample)
    passages_per_s = len(sample) / (time.perf_counter() - t0)
    questions = load_locomo()[1]
    order = np.random.default_rng(args.seed + 5).permutation(len(questions))
    q_texts = [questions[int(order[i % len(order)])].question for i in range(args.warmup + args.queries)]
    embed_ms = time_calls(lambda q: embedder.embed_queries([q]), q_texts[: args.embed_queries], warmup=args.warmup)
    qvecs_all = embedder.embed_queries(q_texts)
    res: dict[str, Any] = {
        "config": {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                   "argv": " ".join(sys.argv[1:] if argv is None else argv), "pool": POOL_NOTE,
                   "embedder": f"{embedder.name} (MiniLMEmbedder, CPU torch)", "client_local_note":
                   "qdrant-client's QdrantClient(':memory:') local mode (filters and scores in pure Python; "
                   f"not a Qdrant server), capped at {args.client_max_size:,} entries and {args.client_queries} "
                   "queries per mode; vector and hybrid only."},
        "machine": machine,
        "embedder": {"name": embedder.name, "batch_size": args.batch, "threads": torch.get_num_threads(),
                     "passages_per_s": round(passages_per_s, 1), "passages_per_s_cache_run": meta.get("passages_per_s"),
                     "query_ms": percentiles(embed_ms)},
        "data": {}, "floor": {}, "adapters": {},
    }
    log(f"embedder: {passages_per_s:.0f} passages/s, one query p50 {res['embedder']['query_ms']['p50']:.2f} ms")
    for n in sizes:
        mems, user_of, vecs = mems_all[:n], users_all[:n], vecs_all[:n]
        counts = np.bincount(user_of, minlength=args.users)
        have = np.flatnonzero(counts)
        uq = [int(u) for u in np.random.default_rng(args.seed + n).choice(have, size=len(q_texts))]
        queries = [(q, user_key(u)) for q, u in zip(q_texts, uq, strict=True)]
        res["data"][str(n)] = {"users_with_entries": len(have), "entries_per_user": {"min": int(counts[have].min()),
                               "median": float(np.median(counts[have])), "p99": float(np.percentile(counts[have], 99)),
                               "max": int(counts.max())}, "episodes": sum(m.get("kind") == "episode" for m in mems),
                               "distinct_texts": len(set(texts[:n]))}
        ffns = floor_fns(vecs, user_of, uq[args.warmup :], qvecs_all[args.warmup :], 10)
        log(f"{n}: data {res['data'][str(n)]}")
        for adapter in args.adapters:
            if adapter == "client_local" and n > args.client_max_size:
                continue
            nq = args.queries if adapter == "edge" else min(args.queries, args.client_queries)
            qs, qv = queries[args.warmup :][:nq], qvecs_all[args.warmup :][:nq]
            with tempfile.TemporaryDirectory(prefix=f"bench-{adapter}-") as tmp:
                svc = make_service(adapter, Path(tmp), embedder)
                r: dict[str, Any] = {"load": load(svc, mems, user_of, vecs, args.add_batch)}
                log(f"{adapter} {n}: load {r['load']}")
                edge = adapter == "edge"  # the floor is timed interleaved with the edge modes
                modes, extra = (MODES, ffns) if edge else (MODES[:3], None)
                r["search"] = search_modes(svc, qs, qv, modes, args.warmup, extra)
                if edge:
                    res["floor"][str(n)] = {k: r["search"].pop(f"floor_{k}") for k in ("user_rows", "full_scan")}
                log(f"{adapter} {n}: " + ", ".join(f"{k} {pp(v)}" for k, v in r["search"].items() if "p50" in v))
                if edge:
                    r["breakdown"] = breakdown(svc, qs, qv)
                    r["add_single"] = add_single(svc, texts[n : n + args.adds + 35], vecs, args.users, args.seed)
                    log(f"edge {n}: breakdown {r['breakdown']}; add (1) {r['add_single']}")
                svc.vectors.close()
                svc.keywords.close()
            res["adapters"].setdefault(adapter, {})[str(n)] = r
        if str(n) not in res["floor"]:
            fl = search_modes(None, queries[args.warmup :], qvecs_all[args.warmup :], (), args.warmup, ffns)
            res["floor"][str(n)] = {k: fl[f"floor_{k}"] for k in ("user_rows", "full_scan")}
    res["targets"], res["load_average_end"] = evaluate(res), load_average()
    write_json(args.out, res)
    plot(res, args.out.with_suffix(".png"))
    md, marker = args.out.with_suffix(".md"), "<!-- notes: kept when the tables are regenerated -->"
    notes = md.read_text().split(marker, 1)[1] if md.exists() and marker in md.read_text() else "\n"
    md.write_text(markdown(res) + "\n" + marker + notes)
    for t in res["targets"]:
        print(f"{'PASS' if t['pass'] else 'FAIL'}  {t['name']} @ {t['size']:,}: {t['value_ms']:.2f} ms "
              f"(bound {t['bound_ms']:.2f} ms)")
    log(f"wrote {args.out} and its .png / .md")
    return 0
