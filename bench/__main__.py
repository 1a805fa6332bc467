"""``python -m bench locomo``: the LoCoMo retrieval benchmark of the engine's default configuration.

    python -m bench locomo --data locomo10.json --out RESULT.json [--limit N] [--configs A,B] [--via backfill]

Runs :mod:`bench.retrieval.run` with ``--via backfill`` (the default here): the file goes through
:mod:`jobs.locomo` and the real backfill job into fresh shard actors of a private namespace (Ray
is started locally unless this process is already connected), then one search per question.
RESULT.json holds ``overall``, ``by_category``, ``latency_ms`` and ``config`` of the default
configuration at its top level (every configuration run under ``configs``). The benchmarks are
not part of the installed packages: run this from the repository root.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bench.retrieval import configs, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="memcluster benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True)
    loc = kinds.add_parser("locomo", help="LoCoMo retrieval recall of the default configuration (RESULT.json)")
    loc.add_argument("--data", required=True, type=Path, help="a LoCoMo-format JSON file (e.g. locomo10.json)")
    loc.add_argument("--out", required=True, type=Path, help="where RESULT.json goes")
    loc.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    loc.add_argument("--configs", default=configs.DEFAULT,
                     help="configurations of bench/retrieval/configs.py (default: the engine's)")
    loc.add_argument("--via", choices=("backfill", "inprocess"), default="backfill",
                     help="ingest through the backfill job (default) or a MemoryService in this process")
    loc.add_argument("--results", type=Path, default=None, help="also write retrieval.json/.md/.png into this folder")
    loc.add_argument("--budget-results", type=Path, default=None,
                     help="also write budget.json/.png (recall within max_tokens 250/500/1000) into this folder")
    return p


def locomo_argv(args: argparse.Namespace) -> list[str]:
    """The :func:`bench.retrieval.run.main` arguments of ``python -m bench locomo``."""
    argv = ["--data", str(args.data), "--out", str(args.out), "--via", args.via, "--configs", args.configs]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    if args.results is not None:
        argv += ["--results", str(args.results)]
    if args.budget_results is not None:
        argv += ["--budget-results", str(args.budget_results)]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run.main(locomo_argv(args))


if __name__ == "__main__":
    raise SystemExit(main())
