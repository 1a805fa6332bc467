"""Time as the archive stores it: exact integer microseconds since the epoch (cursor comparisons need
exactness a float does not give), and float epoch seconds for job times."""

from __future__ import annotations

from datetime import UTC, datetime

from memcore.fields import utc


def to_us(value: datetime) -> int:
    """Microseconds since the epoch (exact, for cursor comparisons)."""
    delta = utc(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def at_us(value: int) -> datetime:
    """The inverse of :func:`to_us`."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def from_us(value: int | None) -> datetime | None:
    return None if value is None else at_us(value)


def from_epoch(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
