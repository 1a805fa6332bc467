"""Test support shared by the test suite and the benchmarks (not part of the installed packages).

- :mod:`testkit.scripted_llm`: the scripted OpenAI-compatible HTTP server that stands in for
  the extraction model (the only part of the system the tests replace);
- :mod:`testkit.postgres`: a private PostgreSQL server in a temporary directory on loopback (the event
  archive's PostgreSQL engine runs against it).

It imports nothing of the project, and only ``tests`` and ``bench`` import it.
"""
