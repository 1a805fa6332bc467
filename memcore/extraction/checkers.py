"""Checkers: pure functions that decide whether a pending delta is extracted now.

A checker returns a bool and nothing else: ``False`` is a normal no-op (no extractor call,
no write, the cursor stays), never an error (seed 004, ``Checker``). Built-ins:
``message_threshold(n)`` (pending messages strictly greater than ``n``) and
``time_interval(s)`` (more than ``s`` seconds since the last extraction, or never extracted);
``all_of`` / ``any_of`` compose them (AND / OR). No checker means "always extract".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memcore.extraction.events import Event
from memcore.fields import now_utc, utc
from memcore.settings import ExtractorSettings


@dataclass(frozen=True)
class CheckContext:
    """What a checker sees: the number of pending (delta) messages and the extraction times."""

    pending: int
    last_extract_at: datetime | None
    now: datetime

    @classmethod
    def of(cls, delta: Sequence[Event], last_extract_at: datetime | None, now: datetime | None = None) -> CheckContext:
        return cls(
            pending=len(delta),
            last_extract_at=utc(last_extract_at) if last_extract_at is not None else None,
            now=utc(now) if now is not None else now_utc(),
        )


Checker = Callable[[CheckContext], bool]


def message_threshold(n: int) -> Checker:
    """True when more than ``n`` messages are pending (strictly greater, as in the seeds)."""
    if n < 0:
        raise ValueError("message threshold must be >= 0")

    def check(ctx: CheckContext) -> bool:
        return ctx.pending > n

    check.__name__ = f"message_threshold({n})"
    return check


def time_interval(seconds: float) -> Checker:
    """True when more than ``seconds`` passed since the last extraction, or there was none."""
    if seconds < 0:
        raise ValueError("time interval must be >= 0")

    def check(ctx: CheckContext) -> bool:
        if ctx.last_extract_at is None:
            return True
        return (utc(ctx.now) - utc(ctx.last_extract_at)).total_seconds() > seconds

    check.__name__ = f"time_interval({seconds})"
    return check


def all_of(*checkers: Checker) -> Checker:
    """AND: every checker passes (no checkers: always true)."""

    def check(ctx: CheckContext) -> bool:
        return all(c(ctx) for c in checkers)

    return check


def any_of(*checkers: Checker) -> Checker:
    """OR: at least one checker passes (no checkers: always true, like no checker at all)."""

    def check(ctx: CheckContext) -> bool:
        return not checkers or any(c(ctx) for c in checkers)

    return check


def always(ctx: CheckContext) -> bool:
    """The checker used when none is configured."""
    return True


def from_settings(settings: ExtractorSettings) -> Checker:
    """The checker an app's extractor settings describe.

    ``message_threshold`` > 0 adds :func:`message_threshold`, ``interval_s`` > 0 adds
    :func:`time_interval`; ``checkers_any`` combines them with OR instead of AND.
    Both zero: :func:`always`.
    """
    parts: list[Checker] = []
    if settings.message_threshold > 0:
        parts.append(message_threshold(settings.message_threshold))
    if settings.interval_s > 0:
        parts.append(time_interval(settings.interval_s))
    if not parts:
        return always
    if len(parts) == 1:
        return parts[0]
    return any_of(*parts) if settings.checkers_any else all_of(*parts)
