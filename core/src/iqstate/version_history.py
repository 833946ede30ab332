"""A key's versions packed in one value (its timeline): how a versioned store keeps them.

Kafka's `RocksDBVersionedStore` packs the versions of a key that fall in one segment into
one value, so a lookup as of a time is one read and a search in memory. This packs every
version of a key into one value: a lookup of the current version, or of the one valid at
any time, is one read; an as-of range is one scan, a value per key.

The format, every number big-endian: the current version first (`timestamp` 8 bytes, a
flag, 1 for a value and 0 for a tombstone, the value's length 4 bytes, the value), so
reading it is one `struct` call and a slice; then the older versions, if any: `n`
(4 bytes), the `n` timestamps (8 bytes each, ascending), the `n` ends of the values in the
values area (4 bytes each), `n` flags, then the values one after the other. The timestamps
and ends come out of one `struct` call each, so a lookup decodes only the version it
returns.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

_HEAD = struct.Struct(">qBI")
HEAD_SIZE = _HEAD.size
_COUNT = struct.Struct(">I")
_END = struct.Struct(">I")

Version = tuple[int, bytes | None]
"""`(timestamp, value)`; a `None` value is a tombstone."""

Found = tuple[bytes, int, int | None]
"""The version a lookup found: `(value, timestamp, valid_to)`; `valid_to` is None for the
current version."""


def _damaged(what: str) -> ValueError:
    return ValueError(f"a damaged versioned value: {what} do not fit in it")


def current_of(timeline: bytes) -> Version:
    """The current version of a timeline."""
    timestamp, flag, length = _HEAD.unpack_from(timeline)
    if HEAD_SIZE + length > len(timeline):
        raise _damaged("the current value's bytes")
    return timestamp, timeline[HEAD_SIZE : HEAD_SIZE + length] if flag else None


def history_at(timeline: bytes) -> int:
    """Where the older versions start in a timeline (its length when there are none)."""
    length: int = _HEAD.unpack_from(timeline)[2]
    return HEAD_SIZE + length


class History:
    """The older versions of a timeline, from offset `at`, read lazily: the timestamps at
    once, a value when asked for."""

    __slots__ = ("_data", "_ends_at", "_flags_at", "_values_at", "stamps")

    def __init__(self, data: bytes, at: int = 0) -> None:
        (count,) = _COUNT.unpack_from(data, at)
        self._values_at = at + 4 + 13 * count
        if self._values_at > len(data):
            raise _damaged("the older versions' timestamps")
        self._data = data
        self.stamps: tuple[int, ...] = _stamps(count).unpack_from(data, at + 4)
        self._ends_at = at + 4 + 8 * count
        self._flags_at = self._ends_at + 4 * count

    def __len__(self) -> int:
        return len(self.stamps)

    def value(self, index: int) -> bytes | None:
        """The value of the `index`th version (None: a tombstone)."""
        data = self._data
        if not data[self._flags_at + index]:
            return None
        end_at = self._ends_at + 4 * index
        start = _END.unpack_from(data, end_at - 4)[0] if index else 0
        end = _END.unpack_from(data, end_at)[0]
        values_at = self._values_at
        if start > end or values_at + end > len(data):
            raise _damaged("an older version's bytes")
        return data[values_at + start : values_at + end]

    def versions(self) -> list[Version]:
        return [(stamp, self.value(index)) for index, stamp in enumerate(self.stamps)]


def versions_of(timeline: bytes) -> tuple[list[Version], Version]:
    """A timeline's older versions (ascending) and its current one."""
    at = history_at(timeline)
    history = History(timeline, at).versions() if at < len(timeline) else []
    return history, current_of(timeline)


def found_at(timeline: bytes, as_of: int | None, boundary: int) -> Found | None:
    """The version of a timeline valid at `as_of` (the current one for None), as
    `(value, timestamp, valid_to)`; None when there is none, it is a tombstone, or `as_of`
    is before `boundary` (the oldest time the history kept can prove)."""
    timestamp, flag, length = _HEAD.unpack_from(timeline)
    at = HEAD_SIZE + length
    if at > len(timeline):
        raise _damaged("the current value's bytes")
    if as_of is None or as_of >= timestamp:
        return (timeline[HEAD_SIZE:at], timestamp, None) if flag else None
    if as_of < boundary or at == len(timeline):
        return None
    history = History(timeline, at)
    stamps = history.stamps
    index = bisect_right(stamps, as_of) - 1
    if index < 0:
        return None
    value = history.value(index)
    if value is None:
        return None
    return value, stamps[index], stamps[index + 1] if index + 1 < len(stamps) else timestamp


_STAMPS: dict[int, struct.Struct] = {}


def _stamps(count: int) -> struct.Struct:
    """The format of `count` timestamps (made once per count)."""
    format_ = _STAMPS.get(count)
    if format_ is None:
        format_ = _STAMPS[count] = struct.Struct(f">{count}q")
    return format_


def pack_history(versions: list[Version]) -> bytes:
    """The older versions part of a timeline (ascending timestamps; empty for none)."""
    count = len(versions)
    if not count:
        return b""
    values = [value or b"" for _, value in versions]
    ends, end = [], 0
    for value in values:
        end += len(value)
        ends.append(end)
    return b"".join(
        (
            _COUNT.pack(count),
            _stamps(count).pack(*(stamp for stamp, _ in versions)),
            struct.pack(f">{count}I", *ends),
            bytes(0 if value is None else 1 for _, value in versions),
            *values,
        )
    )


def pack_timeline(current: Version, history: bytes) -> bytes:
    """A timeline of the `current` version and the older ones `pack_history` packed."""
    timestamp, value = current
    if value is None:
        return _HEAD.pack(timestamp, 0, 0) + history
    return b"".join((_HEAD.pack(timestamp, 1, len(value)), value, history))
