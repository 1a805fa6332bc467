"""The cost of instrumentation: search over HTTP with metrics on and off, alternating
(``python -m bench.instrumentation``; :mod:`~bench.instrumentation.run`, :mod:`~bench.instrumentation.report`)."""
