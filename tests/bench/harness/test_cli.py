"""A benchmark's argument parser (bench/harness/cli.py) names the command it runs as."""

from __future__ import annotations

from bench.harness.cli import parser


def test_the_program_is_the_python_dash_m_name_of_the_benchmark() -> None:
    assert parser("bench.load.run", "Load benchmark.").prog == "python -m bench.load"
    assert parser("bench.scale.hnsw", None).prog == "python -m bench.scale.hnsw"
    p = parser("bench.retrieval.run", "Retrieval.\n\n    python -m bench.retrieval --quick")
    p.add_argument("--quick", action="store_true")
    assert p.parse_args(["--quick"]).quick and "    python -m bench.retrieval --quick" in p.format_help()
