"""``memctl forget`` / ``memctl compact``: erase a user, compact the stores, over HTTP.

    memctl forget --app APP --user USER [--url URL] [--api-key KEY]   (DELETE /v1/apps/{app}/users/{user})
    memctl compact [--url URL] [--api-key KEY]                        (POST /v1/admin/compact)

Both print the service's JSON answer (what was removed; per shard, what was rewritten). The URL and
key are found as for ``memctl export`` (:func:`cluster.backup.base_url`, :func:`cluster.backup.api_key`).
After ``forget``, run ``compact`` (or let the maintenance loop do it on its next sweep) so that the
erased text leaves the data files (docs/deployment.md, "Erasure and retention").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import httpx

from cluster.backup import TIMEOUT, URL_HELP, api_key, base_url
from cluster.deploy import NOT_RUNNING
from memclient import MemclientError, MemoryClient, Unreachable


def _run(name: str, args: argparse.Namespace, state: Callable[[], dict[str, Any] | None],
         call: Callable[[MemoryClient], dict[str, Any]]) -> int:
    url = base_url(args.url, state())
    try:
        with MemoryClient(url, api_key=api_key(args.api_key), timeout=TIMEOUT.read or 600.0) as client:
            result = call(client)
    except (Unreachable, httpx.ConnectError):
        print(f"memctl {name}: nothing answers at {url}: {NOT_RUNNING} (or pass --url)", file=sys.stderr)
        return 1
    except (MemclientError, httpx.HTTPError) as exc:
        print(f"memctl {name}: {url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def add_parsers(sub: Any, state: Callable[[], dict[str, Any] | None]) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default=None, help=URL_HELP)
        p.add_argument("--api-key", default=None, help="an API key (default $MEMCLUSTER_API_KEY; prefer the "
                                                       "environment)")

    forget = sub.add_parser("forget", help="erase one user completely (entries, archived turns, cursors, jobs)")
    forget.add_argument("--app", required=True)
    forget.add_argument("--user", required=True)
    common(forget)
    forget.set_defaults(func=lambda a: _run("forget", a, state, lambda c: c.forget(a.app, a.user)))
    compact = sub.add_parser("compact", help="rewrite the stores so that deleted text leaves the data files")
    common(compact)
    compact.set_defaults(func=lambda a: _run("compact", a, state, lambda c: c.compact()))
