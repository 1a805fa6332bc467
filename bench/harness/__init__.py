"""What every benchmark shares, each fact in one module:

- :mod:`bench.harness.timing`: percentiles, timed calls, stopwatches, profiles;
- :mod:`bench.harness.report`: where results go (``bench/results``), the machine they ran on, JSON,
  markdown tables, the plot style;
- :mod:`bench.harness.locomo`: LoCoMo in one shape (:mod:`jobs.locomo`'s parse plus the QA), and the
  one mapping of entry provenance to LoCoMo turn ids (:func:`bench.harness.locomo.turn_ids`);
- :mod:`bench.harness.datasets`: synthetic memory datasets drawn from LoCoMo, and the vector cache;
- :mod:`bench.harness.served`: the data, request paths and request loop of the benchmarks that run
  against a Serve deployment;
- :mod:`bench.harness.local_ray`: the one Ray start of the benchmarks, the Serve app and its readiness wait;
- :mod:`bench.harness.memory`: memory of this process and of the Ray processes it started (/proc);
- :mod:`bench.harness.cli`: a benchmark's argument parser (``python -m <package>`` as its name).
"""
