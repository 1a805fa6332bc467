"""The extraction benchmark: job overhead per turn without model time, and ingest-to-searchable latency
(``python -m bench.extraction``; :mod:`~bench.extraction.run`, :mod:`~bench.extraction.report`)."""
