"""One error shape for every failure: ``{"error": <class>, "field": <field or null>, "message": <text>}``.

- memcore errors keep their ``status_code`` (422, 404, 409, 403, 503 + ``Retry-After``);
- errors raised inside a Ray actor arrive as ``RayTaskError`` subclasses that are also
  instances of the original class but keep its attributes on ``.cause``: both are handled
  (ray is never imported here);
- request validation → 422 naming the field (``text``, ``max_results``, ``limit``), malformed or
  unparseable JSON → 422 ``body``; oversized bodies → 413 (:class:`BodyLimitMiddleware`);
- a ``RecursionError`` (input nested deeper than a walk of it allows) → 422 ``body``: a client's bad input
  is never a 503 (the JSON the service parses itself is bounded by :mod:`memcore.jsontext`);
- anything else → 503 ``StoreError`` without a stack trace (logged server side).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memcore.errors import MemoryServiceError, StoreError
from memcore.validation import first_error

log = logging.getLogger(__name__)

RETRY_AFTER_S = "1"
_PARAM_SOURCES = ("body", "query", "path", "header", "cookie")
_HTTP_NAMES = {
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    406: "NotAcceptableError",
    413: "PayloadTooLargeError",
    415: "UnsupportedMediaTypeError",
    422: "ValidationError",
    503: "StoreError",
}


class PayloadTooLargeError(HTTPException):
    """The request body is larger than ``settings.http.max_body_bytes`` (HTTP 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=f"request body is larger than {limit} bytes")
        self.limit = limit


def error_json(status: int, error: str, message: str, field: str | None = None,
               headers: dict[str, str] | None = None) -> JSONResponse:
    hdrs = dict(headers or {})
    if status == 503:
        hdrs.setdefault("Retry-After", RETRY_AFTER_S)
    return JSONResponse({"error": error, "field": field, "message": message}, status_code=status, headers=hdrs)


def domain_error(exc: BaseException) -> MemoryServiceError | None:
    """The memcore error behind ``exc``: itself, or the ``.cause`` of a Ray task error; else None."""
    if not isinstance(exc, MemoryServiceError):
        return None
    cause = getattr(exc, "cause", None)
    if isinstance(cause, MemoryServiceError):
        return cause
    return exc


def memory_error_response(exc: MemoryServiceError) -> JSONResponse:
    err = domain_error(exc) or exc
    status = int(getattr(err, "status_code", 500) or 500)
    if not 400 <= status < 600 or status == 500:
        status = 503
    message = getattr(err, "message", None) or (str(err.args[0]) if err.args else type(err).__name__)
    headers = {"WWW-Authenticate": 'Bearer realm="memcluster"'} if status == 401 else None
    return error_json(status, type(err).__name__, str(message), getattr(err, "field", None), headers)


def unexpected_response(exc: BaseException) -> JSONResponse:
    """Any other failure: 503 StoreError, the details stay in the server log."""
    log.error("unexpected %s while serving a request", type(exc).__name__, exc_info=exc)
    return error_json(503, StoreError.__name__, f"the service failed ({type(exc).__name__}); retry later",
                      "store")


def response_for(exc: BaseException) -> JSONResponse:
    """The error response of any exception (used by handlers and the route wrapper)."""
    if isinstance(exc, MemoryServiceError):
        return memory_error_response(exc)
    if isinstance(exc, RequestValidationError):
        return validation_response(exc)
    if isinstance(exc, HTTPException):
        return http_error_response(exc)
    if isinstance(exc, RecursionError):
        log.warning("a request nested too deep for the code that walks it: %s", exc)
        return error_json(422, "ValidationError", "the request is nested too deep", "body")
    return unexpected_response(exc)


def validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if not errors:
        return error_json(422, "ValidationError", "invalid request", "body")
    first = errors[0]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "invalid JSON")
        pos = first.get("loc", ("body", None))[-1]
        return error_json(422, "ValidationError", f"malformed JSON: {detail} (at byte {pos})", "body")
    loc = tuple(first.get("loc", ()))
    msg, field = first_error(errors, skip=_PARAM_SOURCES)
    if loc == ("body",) and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        msg = f"the request body must be a JSON object with Content-Type application/json ({msg})"
    if len(errors) > 1:
        msg = f"{msg} (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return error_json(422, "ValidationError", msg, field or "body")


def http_error_response(exc: HTTPException) -> JSONResponse:
    status = exc.status_code
    headers = dict(exc.headers or {})
    if status == 400:
        # FastAPI's "error parsing the body": invalid UTF-8, nesting too deep for the JSON parser, ...
        cause = exc.__cause__
        why = str(exc.detail)
        if isinstance(cause, RecursionError):
            why = "nesting too deep"
        elif isinstance(cause, ValueError) and "digits" in str(cause):  # Python's int-from-text limit
            why = "a number has too many digits"
        return error_json(422, "ValidationError", f"the request body could not be parsed: {why}", "body")
    if isinstance(exc, PayloadTooLargeError):
        return error_json(413, "PayloadTooLargeError", str(exc.detail), "body", headers)
    name = _HTTP_NAMES.get(status, "HTTPError")
    return error_json(status, name, str(exc.detail), None, headers)


def install_error_handlers(app: FastAPI) -> None:
    async def on_memory_error(request: Request, exc: Exception) -> JSONResponse:
        return response_for(exc)

    app.add_exception_handler(MemoryServiceError, on_memory_error)
    app.add_exception_handler(RequestValidationError, on_memory_error)
    app.add_exception_handler(HTTPException, on_memory_error)
    app.add_exception_handler(Exception, on_memory_error)


class BodyLimitMiddleware:
    """413 for bodies over the limit: the declared Content-Length first, then the streamed size.

    ``limit`` is read per request (``settings.http.max_body_bytes`` once attached).
    """

    def __init__(self, app: ASGIApp, limit: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope)
        declared = Headers(scope=scope).get("content-length")
        try:
            too_big = declared is not None and int(declared) > limit
        except ValueError:
            too_big = False
        if too_big:
            await http_error_response(PayloadTooLargeError(limit))(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLargeError(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except PayloadTooLargeError as exc:
            if started:
                raise
            await http_error_response(exc)(scope, receive, send)
