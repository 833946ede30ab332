"""Times given as timezone-aware datetimes (Kafka's IQv2 takes an `Instant`) become the
milliseconds since the epoch that stores keep; anything else is refused by name."""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import (
    MultiVersionedKeyQuery,
    VersionedKeyQuery,
    VersionedRangeQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.times import MAX_MS, MIN_MS, milliseconds, stored_ms

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
zones = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@given(st.datetimes(timezones=zones))
def test_an_aware_datetime_is_its_milliseconds_since_the_epoch_whatever_its_zone(
    moment: datetime,
) -> None:
    ms = milliseconds(moment, "t")
    assert EPOCH + timedelta(milliseconds=ms) <= moment < EPOCH + timedelta(milliseconds=ms + 1)
    assert milliseconds(moment.astimezone(UTC), "t") == ms


def test_an_int_is_kept_and_other_values_are_refused_naming_what_was_given() -> None:
    class Level(enum.IntEnum):
        HIGH = 7

    assert milliseconds(-5, "t") == -5 and milliseconds(Level.HIGH, "t") == 7
    assert type(milliseconds(Level.HIGH, "t")) is int
    numpy = pytest.importorskip("numpy")
    assert milliseconds(numpy.int64(-9), "t") == -9  # what pandas and Spark code holds
    assert type(milliseconds(numpy.int64(-9), "t")) is int
    with pytest.raises(TypeError, match="as_of is a datetime without a timezone"):
        milliseconds(datetime(2026, 11, 30, 12, 0), "as_of")
    for wrong in (True, 1.5, 2.0, "2026-11-30", None):
        with pytest.raises(TypeError, match="t must be an int .* or a timezone-aware datetime"):
            milliseconds(wrong, "t")  # type: ignore[arg-type]
    assert stored_ms(MAX_MS, "t") == MAX_MS and stored_ms(MIN_MS, "t") == MIN_MS
    with pytest.raises(ValueError, match=r"t \(9223372036854775808\) is outside"):
        stored_ms(MAX_MS + 1, "t")


def test_queries_take_datetimes_and_hold_milliseconds() -> None:
    noon = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ms = 1_796_040_000_000
    assert milliseconds(noon, "t") == ms
    assert VersionedKeyQuery.with_key("k").as_of(noon).as_of_timestamp == ms
    assert VersionedRangeQuery.with_no_bounds().as_of(noon).as_of_timestamp == ms
    versions = MultiVersionedKeyQuery.with_key("k").from_time(noon).to_time(noon)
    assert (versions.from_timestamp, versions.to_timestamp) == (ms, ms)
    windows = WindowKeyQuery.with_key_and_window_start_range("k", noon, noon)
    assert (windows.time_from, windows.time_to) == (ms, ms)
    every = WindowRangeQuery.with_window_start_range(noon - timedelta(seconds=1), noon)
    assert (every.time_from, every.time_to) == (ms - 1000, ms)
    with pytest.raises(ValueError, match="from_time .* is after to_time"):
        MultiVersionedKeyQuery.with_key("k").from_time(noon).to_time(noon - timedelta(1))
    with pytest.raises(TypeError, match="VersionedKeyQuery: as_of is a datetime without"):
        VersionedKeyQuery.with_key("k").as_of(datetime(2026, 11, 30))


def test_pandas_timestamps_are_instants_and_nat_is_refused_by_name() -> None:
    pd = pytest.importorskip("pandas")
    stamp = pd.Timestamp("2026-11-30 12:00:00.000999999", tz="UTC")
    assert milliseconds(stamp, "as_of") == 1_796_040_000_000  # nanoseconds floored
    with pytest.raises(TypeError, match="as_of is not an instant: NaT"):
        milliseconds(pd.NaT, "as_of")
    with pytest.raises(TypeError, match="as_of is a datetime without a timezone"):
        milliseconds(pd.Timestamp("2026-11-30"), "as_of")
