"""What ``include_facts`` costs a search, in one shard in this process (:class:`actors.shard.ShardCore`, embedded
stores, the hashing embedder; no HTTP or Ray hop): the same queries without and with the facts step
(:meth:`ShardCore.search_facts`, then the search within the budget left), p50/p99 ms with bootstrap 95%
intervals, and the tokens the facts add (whitespace words, as the default budget counts)::

    python -m bench.graph.search --memories 2000 --facts 2000 --queries 300
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from actors.shard import ShardCore
from bench.graph.run import summary, timed
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.stores.embedders import HashingEmbedder

KEY = UserKey(app="bench", user="u")
WORDS = ("river", "garden", "coffee", "train", "guitar", "market", "winter", "museum", "bread", "ocean")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.graph.search", description=__doc__)
    p.add_argument("--memories", type=int, default=2000)
    p.add_argument("--facts", type=int, default=2000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--out", type=Path, default=Path("bench/results/graph_search.json"))
    args = p.parse_args(argv)
    rng = random.Random(3)
    people = [f"Person{i}" for i in range(200)]
    with tempfile.TemporaryDirectory(prefix="bench-graph-search-") as tmp:
        settings = Settings.model_validate({"data_dir": Path(tmp), "shards": 1,
                                            "embedder": {"kind": "hashing", "dim": 256}})
        core = ShardCore(settings, 0, HashingEmbedder(dim=256), start_workers=False)
        try:
            batch = [{"text": f"{rng.choice(people)} likes the {rng.choice(WORDS)} near the {rng.choice(WORDS)}"}
                     for _ in range(args.memories)]
            for i in range(0, len(batch), 200):
                core.add_many(KEY, batch[i:i + 200])
            for _ in range(args.facts):
                core.graph_add(KEY, {"subject": rng.choice(people), "predicate": "likes",
                                     "object": rng.choice(WORDS)})
            queries = [f"what does {rng.choice(people)} like about the {rng.choice(WORDS)}"
                       for _ in range(args.queries)]
            for q in queries[:20]:  # warm up both paths
                core.search_json(KEY, {"query": q, "max_tokens": 500})
                core.search_facts(KEY, q, 500)
            plain: list[float] = []
            facts_step: list[float] = []
            with_facts: list[float] = []
            tokens: list[int] = []
            for q in queries:  # interleaved, so load changes hit both alike
                plain.append(timed(core.search_json, KEY, {"query": q, "max_tokens": 500})[0])
                ms_facts, found = timed(core.search_facts, KEY, q, 500)
                ms_search, _ = timed(core.search_json, KEY, {"query": q, "max_tokens": found["max_tokens"]})
                facts_step.append(ms_facts)
                with_facts.append(ms_facts + ms_search)
                tokens.append(sum(len(f["text"].split()) for f in found["facts"]))
        finally:
            core.close()
    result = {"memories": args.memories, "facts": args.facts, "queries": args.queries, "max_tokens": 500,
              "engine": "one ShardCore in process (Qdrant Edge, Tantivy, SQLite), hashing embedder",
              "search": summary(plain), "facts_step": summary(facts_step),
              "search_with_facts": summary(with_facts),
              "fact_tokens": {"mean": round(float(np.mean(tokens)), 2), "max": int(max(tokens))}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
