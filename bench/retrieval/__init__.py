"""The LoCoMo retrieval benchmark (``python -m bench.retrieval``, ``python -m bench locomo``).

:mod:`~bench.retrieval.run` runs the configurations of :mod:`~bench.retrieval.configs` over the indexes
of :mod:`~bench.retrieval.ingest` (in-process or through the backfill job), shapes results
(:mod:`~bench.retrieval.shape`), scores them (:mod:`~bench.retrieval.recall`) and writes the reports
(:mod:`~bench.retrieval.report`: ``retrieval.*``; :mod:`~bench.retrieval.budget`: ``budget.*``).
"""
