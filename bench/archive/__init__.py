"""Benchmarks of the event archive's engines (:mod:`bench.archive.recall`: session recall, SQLite FTS5 vs
PostgreSQL)."""
