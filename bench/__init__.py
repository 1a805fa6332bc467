"""memcluster benchmarks: one package per benchmark over a shared harness (:mod:`bench.harness`: timing,
reports, LoCoMo data, synthetic datasets, the one Ray start and the Serve readiness wait, memory sampling).

Each benchmark package has ``run.py`` (what it measures and its command line) and ``report.py`` (the
markdown, JSON and PNG it writes, under ``bench/results``):

- ``python -m bench locomo --data FILE --out RESULT.json``: the LoCoMo default configuration;
- ``python -m bench.retrieval``: every LoCoMo retrieval configuration (:mod:`bench.retrieval`);
- ``python -m bench.engine`` (and ``bench.engine.probes``): one MemoryService per vector-store adapter;
- ``python -m bench.scale`` (and ``bench.scale.hnsw``, ``bench.scale.writes``, ``bench.scale.report``);
- ``python -m bench.http_api``, ``python -m bench.instrumentation``, ``python -m bench.load``: over Ray Serve;
- ``python -m bench.backfill``, ``python -m bench.extraction``: the jobs.

Run them from the repository root (Ray ones inside ``unshare -n``). Not part of the installed packages.
"""
