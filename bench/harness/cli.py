"""The benchmarks' command lines: one way to build a benchmark's argument parser."""

from __future__ import annotations

import argparse


def parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of benchmark module ``module`` (its ``__name__``, or its ``-m`` name when it runs
    as ``__main__``): ``python -m <package>`` as the program (``bench.load.run`` runs as ``python -m
    bench.load``) and ``doc`` as the help, as written."""
    return argparse.ArgumentParser(prog=f"python -m {module.removesuffix('.run')}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
