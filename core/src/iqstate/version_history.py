"""A key's older versions packed in one value: how a versioned store keeps its history.

Kafka's `RocksDBVersionedStore` packs the versions of a key that fall in one segment into
one value, so a lookup as of a time is one read and a search in memory. This does the same
with one value per key (the history a retention keeps is short): a point lookup reads the
current version and at most this one value, an as-of range one value per key, never a
range scan per key.

The format, every number big-endian: `n` (4 bytes), the `n` timestamps (8 bytes each,
ascending), the `n` ends of the values in the values area (4 bytes each), `n` flags (1 for
a value, 0 for a tombstone), then the values one after the other. The timestamps and ends
come out of one `struct` call each, so a lookup decodes only the version it returns.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

_COUNT = struct.Struct(">I")
_END = struct.Struct(">I")

Version = tuple[int, bytes | None]
"""`(timestamp, value)`; a `None` value is a tombstone."""


class History:
    """The versions packed in one value, read lazily: the timestamps at once, a value when
    asked for."""

    __slots__ = ("_data", "_ends_at", "_flags_at", "_values_at", "stamps")

    def __init__(self, data: bytes) -> None:
        (count,) = _COUNT.unpack_from(data)
        self._data = data
        self.stamps: tuple[int, ...] = _stamps(count).unpack_from(data, 4)
        self._ends_at = 4 + 8 * count
        self._flags_at = self._ends_at + 4 * count
        self._values_at = self._flags_at + count

    def __len__(self) -> int:
        return len(self.stamps)

    def value(self, index: int) -> bytes | None:
        """The value of the `index`th version (None: a tombstone)."""
        data = self._data
        if not data[self._flags_at + index]:
            return None
        end_at = self._ends_at + 4 * index
        start = _END.unpack_from(data, end_at - 4)[0] if index else 0
        values_at = self._values_at
        return data[values_at + start : values_at + _END.unpack_from(data, end_at)[0]]

    def at_or_before(self, timestamp: int) -> int:
        """The index of the newest version at or before `timestamp` (-1: none)."""
        return bisect_right(self.stamps, timestamp) - 1

    def versions(self) -> list[Version]:
        return [(stamp, self.value(index)) for index, stamp in enumerate(self.stamps)]


_STAMPS: dict[int, struct.Struct] = {}


def _stamps(count: int) -> struct.Struct:
    """The format of `count` timestamps (made once per count)."""
    format_ = _STAMPS.get(count)
    if format_ is None:
        format_ = _STAMPS[count] = struct.Struct(f">{count}q")
    return format_


def pack(versions: list[Version]) -> bytes:
    """The value holding `versions` (ascending timestamps)."""
    count = len(versions)
    values = [value or b"" for _, value in versions]
    ends, end = [], 0
    for value in values:
        end += len(value)
        ends.append(end)
    return b"".join(
        (
            _COUNT.pack(count),
            struct.pack(f">{count}q", *(stamp for stamp, _ in versions)),
            struct.pack(f">{count}I", *ends),
            bytes(0 if value is None else 1 for _, value in versions),
            *values,
        )
    )
