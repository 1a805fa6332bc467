"""Does a write cost more in a big shard? Fresh writes into a small and a big shard, alternating (same load).

    python -m bench.scale.writes --big 250000 --small 2500

Two single-shard ``ShardCore`` data dirs in one process: one loaded with the first ``--small`` entries of
:mod:`bench.scale`'s population, one with the first ``--big`` (250k = one shard's share of 1M). Then
``--rounds`` rounds, each writing a fresh batch (:func:`bench.scale.population.fresh_calls`: 16 entries a call,
to random stored users) by ``backfill`` and by ``add_many`` into each shard in turn, so that both see the
same machine load. Writes ``bench/results/scale_writes.json``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.report import load_average, machine_info, write_json
from bench.scale.population import backfill_calls, fresh_calls, population
from bench.scale.probes import Shards, write_batch


def main(argv: list[str] | None = None) -> int:
    ap = parser("bench.scale.writes", __doc__)
    ap.add_argument("--big", type=int, default=250_000)
    ap.add_argument("--small", type=int, default=2_500)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batch", type=int, default=1_000, help="fresh entries per round, shard and method")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale_writes.json"))
    args = ap.parse_args(argv)
    from memcore.factory import build_embedder
    from memcore.settings import Settings

    res: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info()}
    need = args.big + 2 * args.rounds * 2 * args.batch
    with tempfile.TemporaryDirectory(prefix="bench-scale-writes-", dir=args.data_dir) as tmp:
        emb = build_embedder(Settings().embedder)
        pop = population(need, emb.embed_passages, emb.name, seed=args.seed, log=lambda _m: None)
        shards = {name: Shards(Settings(data_dir=Path(tmp) / name, shards=1), emb) for name in ("small", "big")}
        sizes = {"small": args.small, "big": args.big}
        try:
            for name, sh in shards.items():
                sh.open()
                res[f"load_{name}"] = write_batch(sh, list(backfill_calls(pop, 0, sizes[name], 256)), "backfill")
            nxt = args.big
            rounds: dict[str, list[float]] = {f"{n}_{m}": [] for n in shards for m in ("backfill", "add_many")}
            for _ in range(args.rounds):
                for method in ("backfill", "add_many"):
                    for name, sh in shards.items():
                        calls = list(fresh_calls(pop, nxt, nxt + args.batch, sizes[name], 16, args.seed))
                        nxt += args.batch
                        rounds[f"{name}_{method}"].append(write_batch(sh, calls, method)["entries_per_s"])
        finally:
            for sh in shards.values():
                sh.close()
    res["entries_per_s"] = rounds
    res["median_entries_per_s"] = {k: float(np.median(v)) for k, v in rounds.items()}
    res["load_average_end"] = load_average()
    write_json(args.out, res)
    print(res["median_entries_per_s"], res["machine"]["load_average"], res["load_average_end"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
