"""MCP over Streamable HTTP at ``/mcp`` on the ingress (one endpoint: POST, GET, DELETE).

- Auth: ``Authorization: Bearer <key>`` like every other route (401 without a known key). The key
  selects the app; a key that opens several apps names one with ``X-Memcluster-App`` (a key of
  another app: 403); with auth off the header is required.
- The user: ``X-Memcluster-User``, UTF-8, validated like a user id in a path (422 naming the header;
  invalid UTF-8 as well).
- Sessions (``Mcp-Session-Id``) belong to the key, app and user that opened them: another key (or
  user) presenting the id gets 404, as for an unknown session. With more than one ingress replica
  (``ingress_replicas`` > 1) the endpoint runs stateless (no session ids), because sessions live in
  one replica's memory and Ray Serve does not route by session.
- ``Origin``, when sent (browsers), must be a loopback origin or the request's own host (DNS
  rebinding protection); else 403. Protocol versions are negotiated by the SDK.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from actors.backend import ShardBackend
from actors.shard_client import ShardClient
from memcore.errors import PermissionDeniedError, ValidationError
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.tools import offered_schemas
from memcore.validation import make_key
from serve_apps.deps import state as app_state
from serve_apps.http.errors import response_for
from serve_apps.mcp.server import ToolBackend, build_server, resource_json
from serve_apps.protocol_auth import USER_HEADER, header_text, resolve_app

PATH = "/mcp"
SCOPE_KEY = "memcluster.mcp"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ShardToolBackend:
    """:class:`serve_apps.mcp.server.ToolBackend` over the ingress's shard backend."""

    def __init__(self, backend: ShardBackend, settings: Settings, key: UserKey) -> None:
        self.shards, self.key = ShardClient(backend), key
        self.policy = settings.policy(key.app)

    async def offered(self) -> list[dict[str, Any]]:
        return offered_schemas(self.policy)

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        value, _ = await self.shards.tool(self.key, name, arguments, None)  # the app's own mode
        return dict(value)

    async def recall(self, query: str, session: str | None, max_results: int) -> list[dict[str, Any]]:
        hits = await self.shards.recall(self.key, query, session, max_results)
        return [h.model_dump(mode="json") for h in hits]

    async def newest(self, limit: int) -> list[dict[str, Any]]:
        return [resource_json(e) for e in await self.shards.read(self.key, limit)]


async def _resolve(ctx: ServerRequestContext[Any, Any]) -> ToolBackend:
    request = ctx.request
    if not isinstance(request, Request) or SCOPE_KEY not in request.scope:
        raise PermissionDeniedError("no authenticated caller for this MCP request", field="authorization")
    backend, settings = app_state(request)
    return ShardToolBackend(backend, settings, request.scope[SCOPE_KEY])


def origin_allowed(origin: str | None, host: str | None) -> bool:
    if not origin:
        return True
    parts = urlsplit(origin)
    return parts.hostname in _LOOPBACK or (host is not None and parts.netloc == host)


def principal(request: Request, key: UserKey) -> AuthenticatedUser:
    """Who opened a session: the key's digest (client id) and the app and user (subject)."""
    auth = request.headers.get("authorization", "")
    digest = hashlib.sha256(auth.partition(" ")[2].strip().encode("utf-8")).hexdigest()
    token = AccessToken(token="-", client_id=digest, scopes=[], subject=f"{key.app}\x00{key.user}")
    return AuthenticatedUser(token)


class McpEndpoint:
    """The ASGI endpoint; the SDK's session manager starts on the first request, on that event loop."""

    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def _started(self, settings: Settings) -> StreamableHTTPSessionManager:
        if self._ready is None:
            self._ready = asyncio.Event()
            # json_response: a POST is answered with one JSON body, not an SSE stream. The SDK forgets a
            # session whose opening answer did not complete; a client that closes the stream as soon as it
            # has the event (while Serve's proxy is still relaying it) would otherwise lose the session.
            self._manager = StreamableHTTPSessionManager(
                app=build_server(_resolve), stateless=settings.ingress_replicas > 1, json_response=True,
                max_request_body_size=settings.http.max_body_bytes)
            self._task = asyncio.get_running_loop().create_task(self._run(self._manager, self._ready))
        await self._ready.wait()
        assert self._manager is not None
        return self._manager

    @staticmethod
    async def _run(manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            await asyncio.Event().wait()  # until the replica's loop ends

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            _, settings = app_state(request)
            app = resolve_app(request, ("bearer",), default=None)
            user = header_text(request, USER_HEADER) or ""
            try:
                key = make_key(app, user)
            except ValidationError as exc:
                raise ValidationError(str(exc), field=USER_HEADER) from None
            if not origin_allowed(request.headers.get("origin"), request.headers.get("host")):
                raise PermissionDeniedError("the Origin is not allowed (DNS rebinding protection)", field="origin")
            manager = await self._started(settings)
        except Exception as exc:  # noqa: BLE001 - every refusal gets the API's error shape
            await response_for(exc)(scope, receive, send)
            return
        scope["user"] = principal(request, key)
        scope[SCOPE_KEY] = key
        await manager.handle_request(scope, receive, send)
