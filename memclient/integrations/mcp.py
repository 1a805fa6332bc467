"""A stdio MCP server for desktop MCP clients, bridged to memcluster's Streamable HTTP endpoint (``/mcp``).

    pip install "memcluster-client[mcp]"
    memcluster-mcp --app APP --user USER [--url URL]     (key: $MEMCLUSTER_API_KEY)

URL: ``--url``, else ``$MEMCLUSTER_URL``, else http://127.0.0.1:8000. ``memctl mcp`` (the server
distribution) runs this same bridge. Every MCP request of the desktop client (``tools/list``,
``tools/call``, ``resources/list``, ``resources/read``) is forwarded as it is to the service's ``/mcp``
with the app's key and the user (``X-Memcluster-User``; ``X-Memcluster-App`` names the app): the tool
list, schemas, annotations, policy and errors are the service's (``serve_apps.mcp.server``), never a
copy. At start it checks that the service answers, the key opens the app and the user id is valid, and
exits non-zero with a message naming the URL and the problem otherwise (stderr; stdout carries only
MCP messages). A call that fails later (the service went away) is an MCP tool error the model can
read (``{"error", "field", "message"}``), never a transport failure; the next request reconnects.

The ``mcp`` SDK (2.x) is imported only when the bridge runs, so this module imports without the
extra; :func:`main` says which extra to install when it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from memclient import AsyncMemoryClient
from memclient._protocol import DEFAULT_BASE_URL
from memclient.errors import AuthError, MemclientError, Unreachable
from memclient.integrations.extras import require

EXTRA = "mcp"
PATH = "/mcp"
KEY_ENV, URL_ENV = "MEMCLUSTER_API_KEY", "MEMCLUSTER_URL"
APP_HEADER, USER_HEADER = "X-Memcluster-App", "X-Memcluster-User"
TIMEOUT_S = 60.0
CLOSE_S = 5.0
R = TypeVar("R")


class StartError(Exception):
    """The bridge cannot start: the message names the URL and the problem."""


def headers(key: str | None, app: str, user: str) -> dict[bytes, bytes]:
    """What the bridge sends with every MCP request (UTF-8 header values, as ``/mcp`` reads them)."""
    out = {APP_HEADER.encode(): app.encode("utf-8"), USER_HEADER.encode(): user.encode("utf-8")}
    if key:
        out[b"Authorization"] = f"Bearer {key}".encode()
    return out


async def check_service(url: str, key: str | None, app: str, user: str) -> None:
    """Raise :class:`StartError` unless the service at ``url`` answers, ``key`` opens ``app`` and ``user`` is
    a valid user id (one read of the user's newest memory)."""
    async with AsyncMemoryClient(url, api_key=key, timeout=TIMEOUT_S) as client:
        try:
            await client.read(app, user, 1)
        except MemclientError as exc:
            raise StartError(f"memcluster at {url}: {_problem(exc, key)}") from None


def _problem(exc: MemclientError, key: str | None) -> str:
    if isinstance(exc, Unreachable):
        return f"not reachable ({exc.message}); is the service running, and is the URL right?"
    if isinstance(exc, AuthError) and exc.status == 401:
        if key:
            return f"the API key in ${KEY_ENV} was refused ({exc.message})"
        return f"the service needs an API key: set ${KEY_ENV} ({exc.message})"
    return str(exc)


class Remote:
    """The MCP client session to ``{url}/mcp``, opened on first use and again after a failure.

    The session lives in a task of its own (:meth:`_hold`: the SDK's transports are task groups, which
    must be left by the task that entered them), and requests are sent from the handlers' tasks. The
    SDK's client does not answer a request whose POST found no server (it logs the transport error and
    the request waits for its read timeout), so the HTTP transport reports such errors here
    (:meth:`failed`) and a request in flight ends at once with that error."""

    def __init__(self, url: str, key: str | None, app: str, user: str) -> None:
        self.endpoint, self._headers = url.rstrip("/") + PATH, headers(key, app, user)
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self._broken = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def failed(self, exc: BaseException) -> None:
        """A request of the session found no service (called by the HTTP transport, maybe from another thread)."""
        self._error = exc
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._broken.set)

    async def session(self) -> Any:
        self._loop = asyncio.get_running_loop()
        if self._broken.is_set():
            await self.drop()
        if self._session is None:
            opened: asyncio.Future[Any] = self._loop.create_future()
            self._stop = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(opened, self._stop))
            try:
                self._session = await self._until_failure(asyncio.shield(opened))
            except BaseException:
                await self.drop()
                raise
        return self._session

    async def _hold(self, opened: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Open the session, hand it over through ``opened``, keep it until ``stop``, then close it."""
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        remote = self

        class Transport(httpx2.AsyncHTTPTransport):
            async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
                try:
                    return await super().handle_async_request(request)
                except httpx2.TransportError as exc:
                    remote.failed(exc)
                    raise

        try:
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers=self._headers, timeout=TIMEOUT_S, transport=Transport()))
                read, write = await stack.enter_async_context(streamable_http_client(self.endpoint, http_client=http))
                session = await stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=TIMEOUT_S))
                await session.initialize()
                opened.set_result(session)
                await stop.wait()
        except BaseException as exc:  # reported to the opener; a cancel goes on
            if not opened.done():
                opened.set_exception(exc if isinstance(exc, Exception) else ConnectionError("cancelled"))
            if not isinstance(exc, Exception):
                raise

    async def _until_failure(self, pending: Awaitable[R]) -> R:
        """``pending``'s result, or the transport's error as soon as the HTTP transport reports one."""
        task = asyncio.ensure_future(pending)
        broken = asyncio.ensure_future(self._broken.wait())
        try:
            await asyncio.wait({task, broken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            broken.cancel()
        if task.done():
            return task.result()
        task.cancel()
        raise self._error or ConnectionError("the connection to the service failed")

    async def drop(self) -> None:
        """Close and forget the session (the next request opens a new one); a close that takes longer than
        :data:`CLOSE_S` (the SDK may keep retrying its event stream to a service that is gone) is cancelled."""
        holder, self._holder, self._session = self._holder, None, None
        self._stop.set()
        if holder is not None:
            done, _ = await asyncio.wait({holder}, timeout=CLOSE_S)
            if not done:
                holder.cancel()
        self._broken.clear()
        self._error = None

    async def request(self, send: Callable[[Any], Awaitable[R]], *, retry: bool) -> R:
        """Send one request; on a failure the session is dropped and, when ``retry`` (reads), sent once more."""
        try:
            return await self._until_failure(send(await self.session()))
        except Exception:
            await self.drop()
            if not retry:
                raise
        return await self._until_failure(send(await self.session()))

    async def close(self) -> None:
        await self.drop()


def _failure(endpoint: str, exc: BaseException) -> Any:
    """A tool error for a call that did not reach the service (its shape: the service's ``{"error", ...}``)."""
    import mcp_types as types

    body = {"error": "Unreachable", "field": None,
            "message": f"memcluster at {endpoint} did not answer ({type(exc).__name__}: {exc}); try again later"}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body,
                                is_error=True)


def build_bridge(remote: Remote) -> Any:
    """The stdio side: a low-level MCP ``Server`` whose handlers forward to ``remote``."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await remote.request(lambda s: s.list_tools(params=params), retry=True)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:  # a write is not sent twice: a failed call is a tool error, the next call reconnects
            return await remote.request(lambda s: s.call_tool(params.name, params.arguments), retry=False)
        except Exception as exc:  # noqa: BLE001 - never a transport failure for the model
            return _failure(remote.endpoint, exc)

    async def list_resources(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return await remote.request(lambda s: s.list_resources(params=params), retry=True)

    async def read_resource(_ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await remote.request(lambda s: s.read_resource(str(params.uri)), retry=True)

    return Server("memcluster", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_read_resource=read_resource)


async def serve_stdio(url: str, key: str | None, app: str, user: str) -> None:
    """Check the service (:func:`check_service`, :class:`StartError`), open the MCP session, then serve stdio."""
    from mcp.server.stdio import stdio_server

    await check_service(url, key, app, user)
    remote = Remote(url, key, app, user)
    try:
        try:
            await remote.session()
        except Exception as exc:  # noqa: BLE001 - reported as a start failure naming the endpoint
            raise StartError(f"memcluster at {remote.endpoint}: the MCP endpoint did not open a session "
                             f"({type(exc).__name__}: {exc})") from None
        server = build_bridge(remote)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await remote.close()


def add_arguments(parser: argparse.ArgumentParser, *, url_help: str | None = None) -> None:
    """The bridge's flags (``memcluster-mcp`` and ``memctl mcp``)."""
    parser.add_argument("--url", default=None, help=url_help or f"service base URL (default ${URL_ENV}, then "
                                                                f"{DEFAULT_BASE_URL})")
    parser.add_argument("--app", required=True, help=f"the app (its key: ${KEY_ENV})")
    parser.add_argument("--user", required=True, help="the user whose memories the tools read and write")


def run(url: str, key: str | None, app: str, user: str, *, prog: str = "memcluster-mcp") -> int:
    """Run the bridge until stdin closes; 0, or 1 with a message on stderr (``prog: ...``) when it cannot start."""
    try:
        require(EXTRA)
        asyncio.run(serve_stdio(url.rstrip("/"), key, app, user))
    except (StartError, ImportError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``memcluster-mcp``: the console script of the client distribution."""
    parser = argparse.ArgumentParser(prog="memcluster-mcp", description="an MCP server on stdio for one app and "
                                     "user of a running memcluster (for desktop MCP clients)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_BASE_URL
    return run(url, os.environ.get(KEY_ENV) or None, args.app, args.user)


if __name__ == "__main__":
    sys.exit(main())
