"""The error tree of memcluster. Every error names the field or key that caused it.

::

    MemoryServiceError                base of everything raised on purpose
    ├── AuthenticationError           missing or unknown API key      -> HTTP 401
    ├── ValidationError               bad input (field named)         -> HTTP 422
    ├── NotFoundError                 unknown or deleted memory id    -> HTTP 404
    ├── ConflictError                 update would rotate onto an active id -> HTTP 409
    ├── PermissionDeniedError         disabled tool, wrong app key    -> HTTP 403
    ├── StoreError                    a store or embedder failed      -> HTTP 503 (retry)
    │   ├── ArchiveUnavailableError   the archive's database is unreachable or its pool is full -> 503
    │   └── FencedError               a newer incarnation of this shard holds its lease -> 503
    └── ExtractorError                the extraction model failed     -> HTTP 502 (retry later)

The base is called ``MemoryServiceError``, not ``MemoryError``, to avoid shadowing Python's built-in.
"""

from __future__ import annotations


class MemoryServiceError(Exception):
    """Base class. ``field`` names the input field or key the error is about."""

    status_code: int = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        if self.field:
            return f"{self.field}: {self.message}"
        return self.message

    def to_dict(self) -> dict[str, str | None]:
        return {"error": type(self).__name__, "field": self.field, "message": self.message}


class AuthenticationError(MemoryServiceError):
    """No API key, or one that opens no app."""

    status_code = 401


class ValidationError(MemoryServiceError):
    """Input rejected before any store is touched."""

    status_code = 422


class NotFoundError(MemoryServiceError):
    """The memory id (or other key) does not exist or is soft-deleted."""

    status_code = 404


class ConflictError(MemoryServiceError):
    """An update would rotate onto an id that is already active."""

    status_code = 409


class PermissionDeniedError(MemoryServiceError):
    """The operation is disabled or not allowed for this caller."""

    status_code = 403


class StoreError(MemoryServiceError):
    """A backing store or embedder failed; the caller may retry."""

    status_code = 503


class ArchiveUnavailableError(StoreError):
    """The event archive's database cannot be reached (down, restarting, refusing connections) or no
    connection of its pool came free within the pool timeout; nothing was written, the caller may retry."""


class FencedError(StoreError):
    """This shard incarnation lost its lease: another incarnation of the same shard number started since
    and took the lease with a higher epoch (a paused or partitioned old actor woke up after Ray started a
    new one). Nothing of the refused call was written; this incarnation refuses every later call, and
    the caller's retry reaches the incarnation that holds the lease."""


class ExtractorError(MemoryServiceError):
    """The extraction model (an OpenAI-compatible endpoint) failed, timed out or answered garbage.

    An extraction job that hits it leaves the session cursor where it was, so a later job retries.
    """

    status_code = 502
