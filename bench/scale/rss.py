"""Resident memory of one store kind of every shard, opened alone (a child process of :mod:`bench.scale.probes`).

    python -m bench.scale.rss PROBE.json vectors|keywords|archive

Opens the store of every shard as the shard does (:mod:`memcore.factory`, :func:`memcore.factory.build_archive`),
runs the probe's reads (vector searches / keyword searches / archive recall searches for the probe's users), and
prints one JSON line: the child's RSS before opening (imports done), after opening and after the reads (MB).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench.harness.memory import rss_mb


def main(argv: list[str]) -> int:
    import qdrant_edge  # noqa: F401  (the engines' own import cost is baseline, not the store's)
    import tantivy  # noqa: F401

    from memcore import factory
    from memcore.ids import shard_of
    from memcore.layout import ShardLayout
    from memcore.model import UserKey
    from memcore.settings import Settings

    probe = json.loads(Path(argv[0]).read_text())
    store = argv[1]
    settings = Settings(data_dir=probe["data_dir"], shards=probe["shards"])
    keys = [UserKey(app=probe["app"], user=u) for u in probe["users"]]
    qvecs = np.load(probe["qvecs"]).astype(np.float32)
    texts = probe["queries"]
    base = rss_mb()
    if store == "vectors":
        opened = [factory.build_vector_store(ShardLayout(settings, k), probe["dim"]) for k in range(settings.shards)]
        opened_rss = rss_mb()
        for j, key in enumerate(keys):
            opened[shard_of(key, settings.shards)].search(key, qvecs[j % len(qvecs)], limit=100)
    elif store == "keywords":
        kw = [factory.build_keyword_index(ShardLayout(settings, k)) for k in range(settings.shards)]
        opened_rss = rss_mb()
        for j, key in enumerate(keys):
            kw[shard_of(key, settings.shards)].search(key, texts[j % len(texts)], limit=100)
    else:
        arch = [factory.build_archive(ShardLayout(settings, k)) for k in range(settings.shards)]
        opened_rss = rss_mb()
        for j, key in enumerate(keys):
            arch[shard_of(key, settings.shards)].events.search(key, texts[j % len(texts)])
    warm = rss_mb()
    print(json.dumps({"baseline_mb": base, "opened_mb": opened_rss, "warm_mb": warm,
                      "store_mb": round(warm - base, 1), "reads": len(keys)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
