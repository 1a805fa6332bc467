"""Errors as the Mem0 client reads them: every error response under ``/mem0`` also carries ``detail``.

``mem0ai`` takes an error's message from the JSON field ``detail`` (its exceptions' message; on the key
check at construction, its ``ValueError``), else it shows the HTTP status line only. memcluster's shape
``{"error", "field", "message"}`` stays, and ``detail`` is added: ``"<field>: <message>"`` (the message
alone when no field is named), so the client's exception names the parameter. It is a middleware so that
every path answers so: the route guard, body validation, the body limit (413), unknown routes.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def detail_of(body: dict[str, Any]) -> str:
    """The ``detail`` of a memcluster error body."""
    message = str(body.get("message") or body.get("error") or "error")
    field = body.get("field")
    return f"{field}: {message}" if field else message


class Mem0ErrorDetail:
    """Adds ``detail`` to the JSON error responses (status >= 400) of requests under ``prefix``."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = MutableHeaders(raw=list(message.get("headers", [])))
                if message["status"] >= 400 and headers.get("content-type", "").startswith("application/json"):
                    start = message  # held until the body is complete
                    return
                await send(message)
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            try:
                data = json.loads(body)
                if isinstance(data, dict) and "detail" not in data:
                    data["detail"] = detail_of(data)
                    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except ValueError:
                pass
            headers = MutableHeaders(raw=list(start.get("headers", [])))
            headers["content-length"] = str(len(body))
            await send({**start, "headers": headers.raw})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, rewriting_send)
