"""The scale benchmark: the shards' cost curve from 10k to 1M entries, in-process (no Ray).

- ``python -m bench.scale`` (:mod:`~bench.scale.run`): search latency, throughput, writes, memory, disk and
  restart at each size, over the population of :mod:`~bench.scale.population` and the probes of
  :mod:`~bench.scale.probes` (each store's RSS measured by a child, :mod:`~bench.scale.rss`);
- ``python -m bench.scale.report RUN.json [REPEAT.json ...]``: the markdown and PNGs again from saved runs;
- ``python -m bench.scale.hnsw``: a large user's search before and after the HNSW build;
- ``python -m bench.scale.writes``: fresh writes into a small and a big shard, alternating.
"""
