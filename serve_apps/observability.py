"""HTTP telemetry: a pure ASGI middleware that records each request by route *template* (never the
concrete path, which holds the user id) and status class, a search's parts (the same figures as its
``Server-Timing`` header) and its hit and token counts, and one structured JSON log line per request.

A search route hands its figures over as a :class:`SearchReport` in the request's state
(:func:`report_search`): the middleware neither parses the ``Server-Timing`` header nor captures the
response body.

The app label is the path's ``{app}`` when it is configured (an API key or a policy names it),
else ``other``: labels stay bounded whatever clients send. With the recorder off (a plain process, or
``MEMCLUSTER_METRICS=0``) only the log line remains, and it is skipped when its logger is not at INFO.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from memcore import telemetry, tracing

Scope = dict[str, Any]
log = logging.getLogger(__name__)
REQUEST_ID = "x-request-id"
_REPORT = "memcluster.search_report"
"""Key of a search's :class:`SearchReport` in the request's state (``scope["state"]``)."""


@dataclass(frozen=True)
class SearchReport:
    """What a search route tells the middleware: its parts in ms and the hits as the shard encoded them
    (a JSON array; counted off the request path)."""

    parts_ms: Mapping[str, float]
    hits_json: bytes


def server_timing(parts_ms: Mapping[str, float]) -> str:
    """A ``Server-Timing`` value: ``name;dur=ms, ...``."""
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in parts_ms.items())


def report_search(request: Request, report: SearchReport) -> None:
    """Hand ``report`` to :class:`ObservabilityMiddleware` (a successful search only)."""
    request.scope.setdefault("state", {})[_REPORT] = report


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


def _hits_and_tokens(hits_json: bytes) -> tuple[int, int]:
    try:
        hits = json.loads(hits_json) or []
    except ValueError:
        return 0, 0
    return len(hits), sum(len(str((h.get("entry") or h).get("text", "")).split()) for h in hits)


def _observe_hits(hits_json: bytes, app: str) -> None:
    hits, tokens = _hits_and_tokens(hits_json)
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
        box: dict[str, Any] = {"status": 500}
        recording = getattr(telemetry.recorder(), "enabled", False)
        scope.setdefault("state", {})  # shared with the request's state, where a search leaves its report

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                box["status"] = int(message["status"])
                message.setdefault("headers", []).append((REQUEST_ID.encode(), request_id.encode("latin-1")))
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
            report = (scope.get("state") or {}).get(_REPORT)
            if isinstance(report, SearchReport) and status < 400:
                for part, ms in report.parts_ms.items():
                    telemetry.observe("memcluster_search_part_duration_ms", ms, app=app, part=part)
                telemetry.defer(lambda: _observe_hits(report.hits_json, app))  # counted off the request path
        telemetry.log_event("request", request_id=request_id, app=app, route=route, method=method, status=status,
                            duration_ms=round(seconds * 1e3, 2))
