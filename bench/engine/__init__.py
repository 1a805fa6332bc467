"""The engine benchmark: add throughput and search latency of one MemoryService per vector-store adapter.

- ``python -m bench.engine`` (:mod:`~bench.engine.run`, report and plot :mod:`~bench.engine.report`);
- ``python -m bench.engine.probes``: the probes behind its findings (WAL survival, flush cost, payload
  parsing, torch threads).
"""
