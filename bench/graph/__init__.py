"""The knowledge graph's latency benchmark (:mod:`bench.graph.run`)."""
