"""``memctl mcp``: an MCP server over stdio for one app and user of a running memcluster.

    memctl mcp --app APP --user USER [--url URL]        (key: $MEMCLUSTER_API_KEY)

The same bridge as the client distribution's ``memcluster-mcp`` (:mod:`memclient.integrations.mcp`):
stdio forwarded to the service's Streamable HTTP ``/mcp``, so the tools, their policy and errors are the
service's. memctl adds only its URL rule (``--url``, ``$MEMCLUSTER_URL``, the URL ``memctl up`` recorded)
and checks the app and user ids before anything starts. At start the service is checked (reachable,
the key opens the app): otherwise a message naming the URL and the problem, exit status 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cluster.backup import URL_HELP, api_key, base_url
from memclient.integrations import mcp as bridge
from memcore.errors import MemoryServiceError
from memcore.validation import make_key


def cmd_mcp(args: argparse.Namespace, state: Callable[[], dict[str, Any] | None]) -> int:
    try:
        make_key(args.app, args.user)  # a bad app or user id fails before anything starts
    except MemoryServiceError as exc:
        raise ValueError(f"{exc.field}: {exc}") from None
    return bridge.run(base_url(args.url, state()), api_key(None), args.app, args.user, prog="memctl mcp")


def add_parsers(sub: Any, state: Callable[[], dict[str, Any] | None]) -> None:
    """Register ``mcp`` on memctl's subparsers."""
    p = sub.add_parser("mcp", help="run an MCP server on stdio for one app and user (for desktop MCP clients)")
    bridge.add_arguments(p, url_help=URL_HELP)
    p.set_defaults(func=lambda a: cmd_mcp(a, state))
