"""Times as iqstate keeps them: milliseconds since the epoch in Kafka's signed 64-bit range.

A caller may name an instant with a timezone-aware `datetime` instead (Kafka's IQv2 takes an
`Instant`); `milliseconds` turns either into the int every store and changelog record holds.
"""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta

MIN_MS, MAX_MS = -(1 << 63), (1 << 63) - 1
"""The earliest and latest times a store keeps (Kafka's `Long.MIN_VALUE`, `MAX_VALUE`)."""

Time = int | datetime
"""A time as a caller may give it: ms since the epoch, or a timezone-aware datetime."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def milliseconds(value: Time, what: str, *args: object) -> int:
    """`value` in ms since the epoch: an int as it is, an aware `datetime` converted exactly
    (microseconds dropped, toward the past). `TypeError` naming `what` for anything else,
    a naive `datetime` included: which timezone it meant is not known. `what` is filled in
    with `args` (`str.format`) only for an error, so that puts and queries pay nothing
    for the name."""
    if type(value) is int:
        return value
    if isinstance(value, datetime):
        return _datetime_ms(value, _named(what, args))
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # an IntEnum, numpy's and pandas' integers
        except TypeError:
            pass
    raise TypeError(
        f"{_named(what, args)} must be an int (ms since the epoch) or a timezone-aware "
        f"datetime, got {type(value).__name__}"
    )


def _named(what: str, args: tuple[object, ...]) -> str:
    return what.format(*args) if args else what


def _datetime_ms(value: datetime, what: str) -> int:
    """An aware datetime's ms; `TypeError` naming `what` for a naive one, and for one that
    is no instant at all (pandas' `NaT` is a datetime whose every method raises)."""
    try:
        offset = value.utcoffset()
        ms = None if offset is None else (value - _EPOCH) // _ONE_MS
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{what} is not an instant: {value!r} ({exc})") from exc
    if ms is None:
        raise TypeError(
            f"{what} is a datetime without a timezone ({value.isoformat()}): give it one "
            "(datetime.now(timezone.utc), say) or ms since the epoch"
        )
    return int(ms)


def stored_ms(value: Time, what: str, *args: object) -> int:
    """`milliseconds(value, what, *args)`, which a store can keep: `ValueError` outside the
    signed 64-bit range."""
    if type(value) is int and MIN_MS <= value <= MAX_MS:
        return value  # the common case, on the write path: one call, no more
    ms = milliseconds(value, what, *args)
    if not MIN_MS <= ms <= MAX_MS:
        raise ValueError(f"{_named(what, args)} ({ms}) is outside the signed 64-bit range of ms")
    return ms
