"""``memctl reshard --shards M``: change the shard count of an embedded data directory, offline.

    memctl reshard --shards M [--data-dir DIR] [--config configs/serve.local.yaml] [--settings FILE] [--json]

The data directory and the stores are resolved as ``memctl up`` resolves them (the same Serve config and
settings file). memcluster must be down: a running memcluster of this memctl home on the directory, or
any shard holding the directory's lock, is a refusal (exit 1) and nothing changes. A run that was killed
is completed by running the same command again. Exit 2: bad input (``M < 1``, the count the directory
already has, the Qdrant server backend). See :mod:`cluster.reshard`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster import deploy
from cluster.reshard import Reshard, ReshardRefused


def cmd_reshard(args: argparse.Namespace, state: Callable[[], dict[str, Any] | None]) -> int:
    settings = deploy.load_plan(Path(args.config), args.settings, data_dir=args.data_dir).settings
    running = state()
    if running and Path(running.get("data_dir", "")).resolve() == Path(settings.data_dir).resolve() \
            and deploy.readyz(running["base_url"], timeout=2.0) is not None:
        print(f"memctl reshard: memcluster is running on {settings.data_dir} ({running['base_url']}): stop it with "
              "`memctl down`, then run reshard again", file=sys.stderr)
        return 1
    job = Reshard(settings, args.shards, progress=lambda line: print(line, file=sys.stderr, flush=True))
    try:
        summary = job.run()
    except ReshardRefused as exc:
        print(f"memctl reshard: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(f"{summary.data_dir}: {summary.from_shards} -> {summary.to_shards} shards, {summary.users} users, "
              f"{summary.entries} entries, {summary.turns} archived turns, {summary.jobs} jobs moved in "
              f"{summary.seconds} s" + (" (resumed)" if summary.resumed else ""))
    return 0


def add_parsers(sub: Any, state: Callable[[], dict[str, Any] | None], default_config: Path) -> None:
    p = sub.add_parser("reshard", help="change the shard count of an embedded data directory (memcluster down)")
    p.add_argument("--shards", type=int, required=True, help="the new shard count M (>= 1)")
    p.add_argument("--data-dir", default=None, help="the data directory (default: as `memctl up` resolves it)")
    p.add_argument("--config", default=str(default_config), help="Serve config YAML (as for `memctl up`)")
    p.add_argument("--settings", default=None, help="memcluster settings YAML (as for `memctl up`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=lambda a: cmd_reshard(a, state))
