"""Errors raised by the memcluster client.

::

    MemclientError          base: status, error (server class name), field, message
    ├── AuthError           401 no/bad key, 403 another app's key or a disabled tool
    ├── NotFound            404 unknown or deleted memory id, unknown job
    ├── Conflict            409 an update would rotate onto an id that is already active
    ├── InvalidRequest      413 body too large, 422 validation (``field`` names the input); also raised
    │                       before sending (status None) for an id a URL would change (memclient.segments)
    ├── Unavailable         503 a store failed; ``retry_after`` seconds from the server
    └── Unreachable         no HTTP answer at all (connection refused, timeout, ...)
"""

from __future__ import annotations


class MemclientError(Exception):
    """Base of every client error. ``status`` is the HTTP status (``None`` when there was none)."""

    def __init__(
        self, message: str, *, status: int | None = None, error: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.field = field
        self.message = message

    def __str__(self) -> str:
        head = f"[{self.status}] " if self.status is not None else ""
        name = f"{self.error}: " if self.error else ""
        where = f"{self.field}: " if self.field else ""
        return f"{head}{name}{where}{self.message}"


class AuthError(MemclientError):
    """401 (missing or wrong API key) or 403 (key of another app, disabled tool)."""


class NotFound(MemclientError):
    """404: the memory id (or job id) does not exist, or the memory is deleted."""


class Conflict(MemclientError):
    """409: the update would rotate the entry onto an id that is already active."""


class InvalidRequest(MemclientError):
    """413 or 422: the request was rejected before any store was touched; see ``field``. ``status`` is None
    when the client refused it before sending (an id that cannot round-trip through a URL)."""


class Unavailable(MemclientError):
    """503: a store or the embedder failed; retry after ``retry_after`` seconds (if given)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 503,
        error: str | None = None,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, error=error, field=field)
        self.retry_after = retry_after


class Unreachable(MemclientError):
    """The service gave no HTTP answer (connection refused, reset, timed out)."""


_BY_STATUS: dict[int, type[MemclientError]] = {
    401: AuthError,
    403: AuthError,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    400: InvalidRequest,
}


def error_class(status: int) -> type[MemclientError]:
    """The exception class for an HTTP error status (503 is :class:`Unavailable`)."""
    if status == 503:
        return Unavailable
    return _BY_STATUS.get(status, MemclientError)
