"""``memctl bench locomo``: the LoCoMo retrieval benchmark of the engine's default configuration.

    memctl bench locomo --data locomo10.json --out RESULT.json [--limit N] [--configs A,B] [--via backfill]

Runs :mod:`bench.retrieval` (from the source tree: the benchmarks are not part of the installed
package) with ``--via backfill``: the file goes through :mod:`jobs.locomo` and the real backfill
job into fresh shard actors of a private namespace (Ray is started locally unless this process is
already connected), then one search per question. RESULT.json holds ``overall``, ``by_category``,
``latency_ms`` and ``config`` of the default configuration at its top level (every configuration
run under ``configs``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def cmd_bench_locomo(args: argparse.Namespace) -> int:
    if not (ROOT / "bench" / "retrieval.py").is_file():
        raise ValueError(f"memctl bench needs the source tree (no bench/ next to {ROOT / 'cluster'})")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench import retrieval

    argv = ["--data", str(args.data), "--out", str(args.out), "--via", args.via,
            "--configs", args.configs or retrieval.DEFAULT]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    if args.results is not None:
        argv += ["--results", str(args.results)]
    return retrieval.main(argv)


def add_parsers(sub: Any) -> None:
    """Register ``bench`` (with its ``locomo`` subcommand) on memctl's subparsers."""
    bench = sub.add_parser("bench", help="benchmarks of the engine")
    kinds = bench.add_subparsers(dest="bench", required=True)
    loc = kinds.add_parser("locomo", help="LoCoMo retrieval recall of the default configuration (RESULT.json)")
    loc.add_argument("--data", required=True, type=Path, help="a LoCoMo-format JSON file (e.g. locomo10.json)")
    loc.add_argument("--out", required=True, type=Path, help="where RESULT.json goes")
    loc.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    loc.add_argument("--configs", default=None, help="configurations of bench/retrieval.py (default: the engine's)")
    loc.add_argument("--via", choices=("backfill", "inprocess"), default="backfill",
                     help="ingest through the backfill job (default) or a MemoryService in this process")
    loc.add_argument("--results", type=Path, default=None, help="also write retrieval.json/.md/.png into this folder")
    loc.set_defaults(func=cmd_bench_locomo)
