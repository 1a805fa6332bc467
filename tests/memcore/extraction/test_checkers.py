from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memcore.extraction.checkers import (
    CheckContext,
    all_of,
    always,
    any_of,
    from_settings,
    message_threshold,
    time_interval,
)
from memcore.extraction.events import Event
from memcore.settings import ExtractorSettings

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)


def ctx(pending: int = 1, ago: float | None = None) -> CheckContext:
    return CheckContext(pending, None if ago is None else NOW - timedelta(seconds=ago), NOW)


def test_message_threshold_is_strictly_greater() -> None:
    check = message_threshold(2)
    assert not check(ctx(1))
    assert not check(ctx(2))
    assert check(ctx(3))
    assert message_threshold(0)(ctx(1)) and not message_threshold(0)(ctx(0))
    with pytest.raises(ValueError):
        message_threshold(-1)


def test_time_interval() -> None:
    check = time_interval(60)
    assert check(ctx(ago=None))  # never extracted
    assert not check(ctx(ago=30))
    assert not check(ctx(ago=60))  # more than the interval is needed
    assert check(ctx(ago=61))
    with pytest.raises(ValueError):
        time_interval(-1)


def test_all_of_and_any_of() -> None:
    yes, no = always, message_threshold(100)
    assert all_of(yes, yes)(ctx()) and not all_of(yes, no)(ctx()) and not all_of(no, no)(ctx())
    assert any_of(yes, no)(ctx()) and any_of(no, yes)(ctx()) and not any_of(no, no)(ctx())
    assert all_of()(ctx()) and any_of()(ctx())
    combined = any_of(message_threshold(5), time_interval(300))
    assert not combined(ctx(3, ago=100))
    assert combined(ctx(6, ago=100))
    assert combined(ctx(3, ago=301))


def test_from_settings() -> None:
    assert from_settings(ExtractorSettings()) is always
    assert from_settings(ExtractorSettings(message_threshold=0, interval_s=0))(ctx(0))
    only_count = from_settings(ExtractorSettings(message_threshold=2))
    assert not only_count(ctx(2)) and only_count(ctx(3))
    both = from_settings(ExtractorSettings(message_threshold=2, interval_s=60))
    assert not both(ctx(3, ago=10)) and not both(ctx(1, ago=100)) and both(ctx(3, ago=100))
    either = from_settings(ExtractorSettings(message_threshold=2, interval_s=60, checkers_any=True))
    assert either(ctx(3, ago=10)) and either(ctx(1, ago=100)) and not either(ctx(1, ago=10))


def test_check_context_of_a_delta() -> None:
    events = [Event(id=f"e{i}", role="user", content="x", timestamp=NOW) for i in range(3)]
    c = CheckContext.of(events, datetime(2025, 6, 1), NOW)
    assert c.pending == 3 and c.last_extract_at == datetime(2025, 6, 1, tzinfo=UTC) and c.now == NOW
    assert CheckContext.of([], None).last_extract_at is None
