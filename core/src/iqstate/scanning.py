"""Reading a bounded range from an engine's C-level iterator without a Python step per record.

Engines whose iterators yield `(key, value)` pairs in C (py-lmdb's `iternext`/`iterprev`,
rocksdict's `items`) but cannot stop at a bound themselves read chunks that double in size
and cut the chunk that crosses the bound by a bisection: a 100-record range costs a few
Python steps instead of a hundred, and reads at most one chunk beyond the bound.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from operator import add, getitem, itemgetter
from zlib import crc32

Pair = tuple[bytes, bytes]

_first, _second = itemgetter(0), itemgetter(1)
TAG = 4
"""The length of the CRC-32 `iqstate.sealing.seal` appends to a value."""
FIRST_CHUNK, LAST_CHUNK = 16, 4096


def take_while_below(
    records: Iterator[Pair], upper: bytes, inclusive: bool
) -> tuple[list[Pair], bool]:
    """The ascending `records` up to `upper`, and whether a record beyond it was met
    (`False`: the records ran out first)."""
    cut = bisect_right if inclusive else bisect_left
    taken: list[Pair] = []
    size = FIRST_CHUNK
    while True:
        chunk = list(itertools.islice(records, size))
        if chunk:
            last = chunk[-1][0]
            if last > upper or (last == upper and not inclusive):
                taken += chunk[: cut(chunk, upper, key=_first)]
                return taken, True
            taken += chunk
        if len(chunk) < size:
            return taken, False
        size = min(size * 2, LAST_CHUNK)


def take_while_at_least(records: Iterator[Pair], lower: bytes) -> tuple[list[Pair], bool]:
    """The descending `records` down to `lower` (inclusive), and whether a record below it
    was met (`False`: the records ran out first)."""
    taken: list[Pair] = []
    size = FIRST_CHUNK
    while True:
        chunk = list(itertools.islice(records, size))
        if chunk:
            if chunk[-1][0] < lower:
                ascending = list(map(_first, reversed(chunk)))
                taken += chunk[: len(chunk) - bisect_left(ascending, lower)]
                return taken, True
            taken += chunk
        if len(chunk) < size:
            return taken, False
        size = min(size * 2, LAST_CHUNK)


class _ValidRecords(dict[int, bytes]):
    """For each record length, a record of that length whose checksum is valid (zeros
    followed by their CRC-32), made when first needed; kept for short lengths only."""

    def __missing__(self, length: int) -> bytes:
        body = bytes(length - TAG)
        record = body + crc32(body).to_bytes(TAG, "little")
        if length <= _KEPT_LENGTH:
            self[length] = record
        return record


_KEPT_LENGTH = 1024


_VALID = _ValidRecords()
_UNTAGGED = slice(None, -TAG)


def unseal_all(pairs: list[Pair]) -> list[Pair] | None:
    """The values sealed in `pairs` (`iqstate.sealing`), or `None` when any record's
    checksum fails (then check them one by one to name it).

    One CRC-32 over all records instead of one per record: CRC-32 is affine, so the CRC
    of the records laid end to end equals that of valid records of the same lengths iff
    the records' own checks, each shifted by the bytes after it, cancel out. A single
    damaged record cannot cancel (a shift is invertible), so it is always found, as by
    its own check; damage in several records escapes with probability 2^-32, as each
    record's own check would.
    """
    if not pairs:
        return pairs
    keys = list(map(_first, pairs))
    stored = list(map(_second, pairs))
    stored_lengths = list(map(len, stored))
    if min(stored_lengths) < TAG:
        return None
    lengths = map(add, map(len, keys), stored_lengths)
    records = b"".join(itertools.chain.from_iterable(pairs))
    if crc32(records) != crc32(b"".join(map(_VALID.__getitem__, lengths))):
        return None
    return list(zip(keys, map(getitem, stored, itertools.repeat(_UNTAGGED)), strict=True))
