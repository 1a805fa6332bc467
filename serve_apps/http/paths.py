"""Ids in the URL path must round-trip (the URL rule, :mod:`memclient.segments`): 422 naming the parameter.

The router matches the *decoded* path: an id holding ``%2F`` would become two segments and reach another
route (or none: a bare 404), and ``.`` / ``..`` would be taken as ids although no client can send them
unchanged. :class:`PathIdMiddleware` therefore looks at the path as it came over the wire
(``raw_path``), before routing: when a segment, decoded once, is empty, ``.`` or ``..``, contains
``/``, or decodes further into one of those, it finds the route whose template has a parameter at that
place and answers ``422 {"error": "ValidationError", "field": <parameter>, "message": ...}``. The first
template that matches the raw path decides (as the router's first match would); a segment that falls on
a literal part of it (the trailing slash of the Mem0 routes) or on a ``{name:path}`` parameter (whose
handler validates it) is left to the router. A path that no template matches because an encoded ``/``
shifted its segments is refused naming the parameter whose place the segment takes in a template
(``path`` when none), so it can never reach another route.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from memclient.segments import segment_problem
from serve_apps.http.errors import error_json

_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")


@dataclass(frozen=True)
class RouteShape:
    """A route template matched against a raw path: which raw segment each ``str`` parameter covers."""

    regex: re.Pattern[str]
    params: tuple[str, ...]
    """The ``str`` parameters (group names); ``path`` parameters are matched but not named here."""
    segments: tuple[str, ...]
    """The template's segments (``{name}`` for a parameter)."""

    @classmethod
    def of(cls, template: str) -> RouteShape:
        parts: list[str] = []
        params: list[str] = []
        last = 0
        for m in _PARAM.finditer(template):
            parts.append(re.escape(template[last:m.start()]))
            name, kind = m.group(1), m.group(2) or "str"
            if kind == "path":
                parts.append(".*")
            else:
                parts.append(f"(?P<{name}>[^/]*)")
                params.append(name)
            last = m.end()
        parts.append(re.escape(template[last:]))
        return cls(re.compile("".join(parts) + r"\Z"), tuple(params), tuple(template.split("/")[1:]))

    def fields(self, raw: str) -> dict[int, str] | None:
        """Raw segment index (0: the first after the leading ``/``) → parameter name; None: no match."""
        m = self.regex.match(raw)
        if m is None:
            return None
        return {raw.count("/", 0, m.start(name)) - 1: name for name in self.params}

    def param_at(self, segments: list[str], index: int) -> str | None:
        """The ``str`` parameter at ``index`` when the segments before it match the template's, else None
        (how a path with an encoded ``/`` is told apart: the segments after it are shifted)."""
        if index >= len(self.segments) or not (m := _PARAM.fullmatch(self.segments[index])) or m.group(2):
            return None
        for have, want in zip(segments[:index], self.segments[:index], strict=False):
            if not _PARAM.fullmatch(want) and unquote(have) != want:
                return None
        return m.group(1)


def templates(routes: Iterable[Any], prefix: str = "") -> Iterator[str]:
    """Every route template of an app, through FastAPI's included routers and Starlette mounts."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI >= 0.16x keeps include_router() nested
        if included is not None:
            yield from templates(included.routes, prefix + str(getattr(route.include_context, "prefix", "")))
        elif isinstance(getattr(route, "routes", None), list):  # a Mount
            yield from templates(route.routes, prefix + str(getattr(route, "path", "")))
        elif isinstance(getattr(route, "path", None), str):
            yield prefix + route.path


def refusal(shapes: Iterable[RouteShape], raw: str) -> tuple[str, str] | None:
    """(field, message) when the raw path holds an id that cannot round-trip; None otherwise. The first
    template that matches decides, as the router's first match would."""
    segments = raw.split("/")[1:]
    problems = {i: p for i, seg in enumerate(segments) if (p := segment_problem(unquote(seg))) is not None}
    if not problems:
        return None
    found = next((f for shape in shapes if (f := shape.fields(raw)) is not None), None)
    if found is not None:
        odd = sorted(problems.keys() & found.keys())
        return (found[odd[0]], f"{found[odd[0]]} {problems[odd[0]]}") if odd else None
    for i in sorted(i for i in problems if "/" in unquote(segments[i])):
        name = next((n for shape in shapes if (n := shape.param_at(segments, i)) is not None), None)
        return (name, f"{name} {problems[i]}") if name else ("path", f"a path segment {problems[i]}")
    return None


class PathIdMiddleware:
    """422 for an id in the path that a URL would change (the module docstring); ``routes`` gives the
    app's routes, read once at the first request (every route is registered by then)."""

    def __init__(self, app: ASGIApp, routes: Callable[[], Iterable[Any]]) -> None:
        self.app = app
        self.routes = routes
        self._shapes: list[RouteShape] | None = None

    def shapes(self) -> list[RouteShape]:
        if self._shapes is None:
            self._shapes = [RouteShape.of(t) for t in templates(self.routes())]
        return self._shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and isinstance(raw, bytes):
            path = raw.decode("latin-1").partition("?")[0]
            root = str(scope.get("root_path") or "")
            if root and path.startswith(root):
                path = path[len(root):]
            refused = refusal(self.shapes(), path)
            if refused is not None:
                field, message = refused
                await error_json(422, "ValidationError", message, field)(scope, receive, send)
                return
        await self.app(scope, receive, send)
