"""HTTP telemetry: a pure ASGI middleware that records each request by route *template* (never the
concrete path, which holds the user id) and status class, the search parts of the ``Server-Timing``
header, and one structured JSON log line per request.

The app label is the path's ``{app}`` when it is configured (an API key or a policy names it),
else ``other``: labels stay bounded whatever clients send. With the recorder off (a plain process, or
``MEMCLUSTER_METRICS=0``) only the log line remains, and it is skipped when its logger is not at INFO.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from memcore import telemetry, tracing
from serve_apps.deps import TIMING_HEADER

Scope = dict[str, Any]
log = logging.getLogger(__name__)
SEARCH_ROUTES = frozenset({"/v1/apps/{app}/users/{user}/memories/search"})
REQUEST_ID = "x-request-id"


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None) or getattr(route, "path_format", None)
    return str(path) if path else "unmatched"


def app_label(scope: Scope, known: frozenset[str]) -> str:
    app = (scope.get("path_params") or {}).get("app")
    return app if isinstance(app, str) and app in known else "other"


def known_apps(app: Any) -> frozenset[str]:
    settings = getattr(getattr(app, "state", None), "settings", None)
    if settings is None:
        return frozenset()
    return frozenset(settings.api_keys) | frozenset(settings.memory.apps)


def parse_timing(value: str) -> dict[str, float]:
    """``name;dur=ms, ...`` → ``{name: ms}``."""
    out: dict[str, float] = {}
    for part in value.split(","):
        name, _, rest = part.strip().partition(";dur=")
        try:
            out[name] = float(rest)
        except ValueError:
            continue
    return out


def _hits_and_tokens(body: bytes) -> tuple[int, int]:
    try:
        hits = json.loads(body).get("hits") or []
    except (ValueError, AttributeError):
        return 0, 0
    return len(hits), sum(len(str((h.get("entry") or h).get("text", "")).split()) for h in hits)


def _observe_hits(body: bytes, app: str) -> None:
    hits, tokens = _hits_and_tokens(body)
    telemetry.observe("memcluster_search_hits", float(hits), app=app)
    telemetry.observe("memcluster_search_tokens", float(tokens), app=app)


class ObservabilityMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._known: frozenset[str] | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(REQUEST_ID.encode(), b"").decode("latin-1") or uuid.uuid4().hex
        box: dict[str, Any] = {"status": 500, "timing": None, "body": []}
        recording = getattr(telemetry.recorder(), "enabled", False)

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                box["status"] = int(message["status"])
                for k, v in message.get("headers") or []:
                    if k.lower() == TIMING_HEADER.lower().encode():
                        box["timing"] = v.decode("latin-1")
                message.setdefault("headers", []).append((REQUEST_ID.encode(), request_id.encode("latin-1")))
            elif message["type"] == "http.response.body" and recording and box["timing"] is not None:
                box["body"].append(message.get("body", b""))
            await send(message)

        with tracing.span("http.request", http__request__method=scope.get("method")) as span:
            try:
                await self.app(scope, receive, sending)
            finally:
                self._record(scope, box, request_id, time.perf_counter() - t0, recording)
                if span is not None:
                    span.update_name(f"{scope.get('method')} {route_template(scope)}")
                    span.set_attribute("http.route", route_template(scope))
                    span.set_attribute("http.response.status_code", box["status"])

    def _record(self, scope: Scope, box: dict[str, Any], request_id: str, seconds: float, recording: bool) -> None:
        try:
            self._record_unsafe(scope, box, request_id, seconds, recording)
        except Exception:
            log.exception("recording the request's telemetry failed")

    def _record_unsafe(self, scope: Scope, box: dict[str, Any], request_id: str, seconds: float,
                       recording: bool) -> None:
        if self._known is None:
            self._known = known_apps(scope.get("app"))
        route, status = route_template(scope), box["status"]
        app, method = app_label(scope, self._known), scope.get("method", "")
        if recording:
            telemetry.count("memcluster_http_requests_total", 1.0, app=app, route=route, method=method,
                            status_class=telemetry.status_class(status))
            telemetry.observe("memcluster_http_request_duration_ms", seconds * 1e3, app=app, route=route,
                              method=method)
            if route in SEARCH_ROUTES and box["timing"] and status < 400:
                for part, ms in parse_timing(box["timing"]).items():
                    telemetry.observe("memcluster_search_part_duration_ms", ms, app=app, part=part)
                telemetry.defer(lambda: _observe_hits(b"".join(box["body"]), app))  # parsed off the request path
        telemetry.log_event("request", request_id=request_id, app=app, route=route, method=method, status=status,
                            duration_ms=round(seconds * 1e3, 2))
