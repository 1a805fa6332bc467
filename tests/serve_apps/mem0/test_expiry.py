"""Mem0's ``expiration_date`` (a UTC date, inclusive) as memcluster's ``expires_at``: visible through the
whole day, expired from 00:00 UTC of the next; shown back as the same date; bad dates refused naming it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memcore.errors import ValidationError
from memcore.model import Entry
from serve_apps.mem0.map import EXPIRATION, expiration_date, expiry_of

NOW = datetime(2030, 1, 15, 12, tzinfo=UTC)


def _entry(expires_at: datetime | None) -> Entry:
    return Entry(id="x", app="a", user="u", text="t", created_at=NOW, updated_at=NOW, expires_at=expires_at)


def test_the_day_is_inclusive_and_round_trips() -> None:
    at = expiry_of("2030-01-31", NOW)
    assert at == datetime(2030, 2, 1, tzinfo=UTC)
    e = _entry(at)
    assert not e.expired(datetime(2030, 1, 31, 23, 59, 59, 999999, tzinfo=UTC))
    assert e.expired(datetime(2030, 2, 1, tzinfo=UTC))
    assert expiration_date(e) == "2030-01-31"
    assert expiry_of("2030-01-15", NOW) == datetime(2030, 1, 16, tzinfo=UTC)  # today: visible until midnight
    assert expiry_of(None, NOW) is None and expiration_date(_entry(None)) is None


def test_an_expiry_off_midnight_shows_its_last_visible_day() -> None:
    assert expiration_date(_entry(datetime(2030, 3, 4, 10, 30, tzinfo=UTC))) == "2030-03-04"
    assert expiration_date(_entry(datetime(2030, 3, 4, tzinfo=UTC) + timedelta(microseconds=1))) == "2030-03-04"


@pytest.mark.parametrize("bad", ["2030-02-30", "2030-1-31", "20300131", "2030-01-31T00:00:00Z", "2030-W05-1",
                                 "2030-01-14", "9999-12-31", 20300131, "", [], {"date": "2030-01-31"}])
def test_bad_dates_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        expiry_of(bad, NOW)
    assert err.value.field == EXPIRATION
