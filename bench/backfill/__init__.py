"""The backfill benchmark: the Ray Data job's throughput on LoCoMo-10 and a 10× synthetic archive
(``python -m bench.backfill``; :mod:`~bench.backfill.run`, :mod:`~bench.backfill.report`)."""
