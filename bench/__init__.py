"""memcluster benchmarks: a harness (timing, report, data, serve_cluster) and one module per benchmark.

Run them as modules from the repository root, e.g. ``python -m bench locomo --data FILE --out RESULT.json``
or ``python -m bench.http_api``. Not part of the installed packages.
"""
