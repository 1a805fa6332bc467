"""When the clients try a call again: idempotent calls, on no answer or a 5xx answer, with backoff.

Idempotent calls (:attr:`memclient._protocol.Call.idempotent`) are the reads (get, read, search,
preload, tools, job, recall, health), ``add`` (content-addressed: the same content is the same
memory, so a second add of something already stored changes nothing but ``updated_at``) and the
deletes (``delete``, ``clear``; a retried ``delete`` that finds the memory gone counts as done,
since the attempt whose answer was lost removed it). ``update`` (it rotates ids), ``call_tool`` and
``ingest`` are sent once.

They are tried again when no HTTP answer came (connection refused or dropped, timeout) and on
500, 502, 503 and 504, up to :attr:`Retry.attempts` tries in all; the wait before try ``n + 1`` is
``backoff * multiplier ** (n - 1)``, or the server's ``Retry-After`` when it gives one, and never
more than :attr:`Retry.max_delay`. The last failure is raised as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

#: HTTP statuses worth another try (a replica or a store that may be back in a moment).
RETRY_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True)
class Retry:
    """How a client retries idempotent calls; ``Retry(attempts=1)`` (or ``Retry.never()``) turns it off."""

    attempts: int = 4
    """Tries in all, the first included (at least 1)."""
    backoff: float = 0.25
    """Seconds before the second try."""
    multiplier: float = 2.0
    """Growth of the wait from one try to the next."""
    max_delay: float = 10.0
    """No wait is longer, a server's ``Retry-After`` included."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.backoff < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("backoff and max_delay must be >= 0 and multiplier >= 1")

    @classmethod
    def never(cls) -> Retry:
        return cls(attempts=1)

    def delay(self, tried: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the ``tried``-th failed try (1, 2, ...)."""
        wait = retry_after if retry_after is not None else self.backoff * self.multiplier ** (tried - 1)
        return max(0.0, min(self.max_delay, wait))

    def status_retryable(self, status: int) -> bool:
        return status in RETRY_STATUSES
