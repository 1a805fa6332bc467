"""The load benchmark: a mixed open-loop workload against Ray Serve at rising rates, then a soak
(``python -m bench.load``; :mod:`~bench.load.run`, verdict, report and plot :mod:`~bench.load.report`)."""
