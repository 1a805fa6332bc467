"""The one rule for ids that travel as a segment of a URL path: apps, users, sessions, memory ids,
event ids, job ids, tool names (``docs/identity.md``, "The URL rule").

An id must come out of a URL exactly as it went in. HTTP clients and proxies change a path on its
way (they drop ``.`` segments, resolve ``..`` against the segment before, split at ``/``, and some
decode ``%2F`` or ``%2E`` once more before routing), so an id is refused when it is empty, is ``.`` or
``..``, contains ``/``, or turns into one of those when it is percent-decoded once or more often
(``%2e``, ``%2E%2e``, ``%2f``, ``%252e``, ...). Every other text round-trips: memclient encodes
each segment with :func:`urllib.parse.quote` (``safe=""``) and the server decodes it once.

The server (``memcore.fields``, its path middleware ``serve_apps.http.paths``) and the client
(``memclient._protocol``) both import this module; it imports nothing but the standard library,
so the client installs without the server and the rule still has one home.
"""

from __future__ import annotations

from urllib.parse import unquote

DOT_SEGMENTS = (".", "..")


def segment_problem(value: str) -> str | None:
    """Why ``value`` cannot round-trip as a URL path segment (a phrase to follow the id's name), or None."""
    seen = value
    while True:
        how = "" if seen == value else f" (percent-decoded it is {seen!r})"
        if not seen:
            return f"must not be empty{how}"
        if seen in DOT_SEGMENTS:
            return f"must not be {value!r}{how}: a URL drops '.' and climbs a level for '..'"
        if "/" in seen:
            return f"must not contain '/'{how}: it separates the segments of a URL path"
        decoded = unquote(seen)
        if decoded == seen:
            return None
        seen = decoded  # shorter each time: the loop ends


def check_segment(value: str, what: str) -> str:
    """``value`` if it round-trips as a URL path segment (the module docstring); else ValueError
    naming ``what`` (``"session"``, ``"event id"``, ...)."""
    problem = segment_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return value
