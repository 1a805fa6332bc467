"""``memctl backfill`` and ``memctl reextract``: the Ray Data jobs of :mod:`jobs` against the running cluster.

The cluster's address and settings come from memctl's state file: the job resolves the
settings exactly as ``memctl up`` did (same Serve config, settings file, data dir, shard count,
namespace), connects with ``ray.init(address=...)`` and writes through the shard actors.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster import deploy
from memcore.settings import Settings
from memcore.vocabulary import GRANULARITIES, POLICIES


def job_settings(state: dict[str, Any], settings_file: str | None, default_config: Path) -> Settings:
    """The running cluster's settings, resolved as ``up`` resolved them."""
    config = Path(state.get("config") or default_config)
    plan = deploy.load_plan(config, settings_file or state.get("settings_file"), data_dir=state["data_dir"],
                            shards=state.get("shards"))
    return plan.settings.model_copy(update={"namespace": state.get("namespace", plan.settings.namespace)})


def connect(state: dict[str, Any] | None, settings_file: str | None, default_config: Path) -> Settings:
    if state is None:
        raise ValueError("memcluster is not running (no state file): run `memctl up` first")
    settings = job_settings(state, settings_file, default_config)
    import ray

    if not ray.is_initialized():
        ray.init(address=state["gcs"], namespace=settings.namespace, logging_level=logging.ERROR,
                 log_to_driver=False)
    return settings


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    from jobs import locomo
    from jobs.backfill import BackfillOptions, Source, run_backfill

    if args.locomo:
        source = Source(rows=locomo.rows(args.locomo, args.app), label=args.locomo)
    else:
        source = Source(paths=list(args.input), fmt=args.format)
    options = BackfillOptions(concurrency=args.concurrency, progress_s=args.progress_s, granularity=args.granularity)
    summary = run_backfill(settings, source, options)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2, default=str))
    return 0 if summary.ok else 1


def cmd_reextract(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.reextract import ReextractOptions, generations, run_drop, run_reextract

    if args.list:
        for info in generations(settings):
            print(json.dumps(info))
        return 0
    if args.drop_generation is not None:
        run_drop(settings, args.drop_generation)
        return 0
    update: dict[str, Any] = {}
    if args.extractor_base_url is not None:
        update["base_url"] = args.extractor_base_url or None
    for name in ("model", "policy", "granularity"):
        if getattr(args, name) is not None:
            update[name] = getattr(args, name)
    extractor = type(settings.extractor).model_validate({**settings.extractor.model_dump(), **update})
    options = ReextractOptions(apps=list(args.apps or []), users=list(args.users or []), extractor=extractor,
                               concurrency=args.concurrency, progress_s=args.progress_s)
    return 0 if run_reextract(settings, options).ok else 1


def add_parsers(sub: Any, state: Callable[[], dict[str, Any] | None], default_config: Path) -> None:
    """Register ``backfill`` and ``reextract`` on memctl's subparsers."""

    def runner(cmd: Callable[[argparse.Namespace, Settings], int]) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            if getattr(args, "locomo", None) and not args.app:
                raise ValueError("--locomo needs --app")
            return cmd(args, connect(state(), args.settings, default_config))

        return run

    bf = sub.add_parser("backfill", help="load archived sessions into the running cluster (a Ray Data job)")
    src = bf.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", nargs="+", help="JSONL or Parquet files/dirs, local or pyarrow URIs (s3://, file://)")
    src.add_argument("--locomo", help="a LoCoMo-format JSON file (each conversation one user)")
    bf.add_argument("--app", help="the app of the LoCoMo users")
    bf.add_argument("--format", choices=["jsonl", "parquet"], default=None, help="default: by file extension")
    bf.add_argument("--concurrency", type=int, default=1, help="embedding actors")
    bf.add_argument("--granularity", choices=GRANULARITIES, default=None,
                    help="verbatim granularity (default: the settings')")
    bf.add_argument("--settings", default=None, help="settings YAML (default: the one `up` used)")
    bf.add_argument("--progress-s", type=float, default=10.0, help="seconds between progress lines (0: none)")
    bf.add_argument("--json", action="store_true", help="print the summary as JSON too")
    bf.set_defaults(func=runner(cmd_backfill))

    rx = sub.add_parser("reextract", help="re-extract archived sessions into a new generation, then switch")
    rx.add_argument("--apps", nargs="+", default=None, help="only these apps (default: all)")
    rx.add_argument("--users", nargs="+", default=None, help="only these user ids (default: all)")
    rx.add_argument("--policy", choices=POLICIES, default=None)
    rx.add_argument("--extractor-base-url", default=None, help="an OpenAI-compatible URL ('' for verbatim)")
    rx.add_argument("--model", default=None, help="the extraction model (with --extractor-base-url)")
    rx.add_argument("--granularity", choices=GRANULARITIES, default=None,
                    help="verbatim granularity")
    rx.add_argument("--concurrency", type=int, default=4, help="users re-extracted at once")
    rx.add_argument("--settings", default=None, help="settings YAML (default: the one `up` used)")
    rx.add_argument("--progress-s", type=float, default=10.0)
    mode = rx.add_mutually_exclusive_group()
    mode.add_argument("--drop-generation", type=int, default=None, metavar="N", help="delete old generation N")
    mode.add_argument("--list", action="store_true", help="show each shard's generations")
    rx.set_defaults(func=runner(cmd_reextract))
