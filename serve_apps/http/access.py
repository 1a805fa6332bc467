"""Who may call a route, and the state routes read: the shard backend, settings, API-key checks.

``attach`` gives an app its backend; :class:`ScopedRoute` checks the key of the app in the path
(401 without a known key, 403 for another app's) and the path's encoding before the body is read,
and turns every failure into the error shape; :class:`KeyRoute` accepts any valid key and leaves
the resource's app to the handler. Keys are compared in constant time over every key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, FastAPI, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException
from starlette.types import Scope

from actors.backend import ShardBackend
from memcore.errors import AuthenticationError, PermissionDeniedError, ValidationError
from memcore.ports import Embedder
from memcore.settings import HttpSettings, Settings
from serve_apps.deps import state
from serve_apps.http.errors import response_for

ROUTE_T0 = "memcluster.t0"
"""Scope key: when the route wrapper started (auth, body, validation, handler), for ``Server-Timing``."""


def attach(app: FastAPI, backend: ShardBackend, settings: Settings, query_embedder: Embedder | None = None) -> None:
    """Give the app its shard backend and settings (routes read them from ``app.state``).

    With a ``query_embedder`` the search route embeds the query in this process and sends the
    vector to the shard (one hop fewer than the shard asking the embedder deployment)."""
    app.state.backend = backend
    app.state.settings = settings
    app.state.query_embedder = query_embedder


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def granted_apps(request: Request, schemes: tuple[str, ...] = ("bearer",)) -> set[str] | None:
    """The apps the presented ``Authorization: Bearer <key>`` opens (None: auth is off).

    Every configured key is compared in constant time; a missing or unknown key is 401.
    ``schemes`` are the accepted authorization schemes, lower case (the Mem0 routes add ``token``).
    """
    _, settings = state(request)
    keys = settings.api_key_map()
    if not keys:
        return None
    values = request.headers.getlist("authorization")
    if len(values) > 1:  # proxies and this app could each pick a different one
        raise AuthenticationError("more than one Authorization header", field="authorization")
    scheme, _, token = (values[0] if values else "").partition(" ")
    token = token.strip()
    if scheme.lower() not in schemes or not token:
        raise AuthenticationError("an API key is required: Authorization: Bearer <key>", field="authorization")
    presented = _digest(token)
    granted: set[str] = set()
    for app_name, key in keys.items():  # every key is compared; no early exit
        if hmac.compare_digest(presented, _digest(key)):
            granted.add(app_name)
    if not granted:
        raise AuthenticationError("unknown API key", field="authorization")
    return granted


def authorize(request: Request) -> None:
    """The key must open the app named in the path (403 for a key of another app)."""
    granted = granted_apps(request)
    if granted is None:
        return
    app_name = str(request.path_params.get("app", ""))
    if app_name not in granted:
        raise PermissionDeniedError(f"the API key does not grant access to app {app_name!r}", field="app")


def check_path_encoding(request: Request) -> None:
    """Path segments must be UTF-8 once percent-decoded: the server would otherwise replace bad bytes
    with U+FFFD, and different raw ids (``%FF``, ``%FE``, a CESU-8 surrogate ``%ED%A0%80``) would
    name the same user or app."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError("the URL path is not valid UTF-8 once percent-decoded", field="path") from None


class ScopedRoute(APIRoute):
    """The one route guard: runs :meth:`check` before the body is read, and turns every failure into the
    error shape. :meth:`check` is the hook: here it checks the API key of the app in the path and the
    path's encoding; :class:`KeyRoute` and :class:`serve_apps.mem0.api.Mem0Route` override it."""

    def check(self, request: Request) -> None:
        authorize(request)
        check_path_encoding(request)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            request.scope[ROUTE_T0] = time.perf_counter()
            try:
                self.check(request)
                return await handler(request)
            except (HTTPException, RequestValidationError):
                raise  # the app's handlers render these
            except Exception as exc:  # noqa: BLE001 - every failure becomes the error shape (logged there)
                return response_for(exc)

        return guarded


class KeyRoute(ScopedRoute):
    """For routes without an app in the path: any valid key; the handler checks the resource's app
    against ``request.state.granted_apps`` (None when auth is off)."""

    def check(self, request: Request) -> None:
        request.state.granted_apps = granted_apps(request)
        check_path_encoding(request)


USER_PREFIX = "/v1/apps/{app}/users/{user}"
"""Where every user-scoped route lives."""
bearer = HTTPBearer(auto_error=False, description="The API key of the app in the path.")
"""The security scheme OpenAPI shows on every guarded route (the check itself is the route class's)."""


def scoped_router(prefix: str = "") -> APIRouter:
    """A router of :class:`ScopedRoute` routes: the key must open the app in the path."""
    return APIRouter(prefix=prefix, route_class=ScopedRoute, dependencies=[Security(bearer)])


def key_router() -> APIRouter:
    """A router of :class:`KeyRoute` routes (no app in the path: any valid key, the handler checks)."""
    return APIRouter(route_class=KeyRoute, dependencies=[Security(bearer)])


_IMPORT_ROUTE = re.compile(r"/v1/apps/[^/]+/import$")


def body_limit(scope: Scope) -> int:
    """``max_import_bytes`` for ``POST /v1/apps/{app}/import`` (a JSONL backup), else ``max_body_bytes``."""
    app = scope.get("app")
    settings = getattr(getattr(app, "state", None), "settings", None)
    http = settings.http if isinstance(settings, Settings) else HttpSettings()
    if scope.get("method") == "POST" and _IMPORT_ROUTE.search(str(scope.get("path", ""))):
        return http.max_import_bytes
    return http.max_body_bytes
