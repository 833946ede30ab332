"""Reading a bounded range from an engine's C-level iterator without a Python step per record.

Engines whose iterators yield `(key, value)` pairs in C (py-lmdb's `iternext`/`iterprev`,
rocksdict's `items`) but cannot stop at a bound themselves read chunks that double in size
and cut the chunk that crosses the bound by a bisection: a 100-record range costs a few
Python steps instead of a hundred, and reads at most one chunk beyond the bound.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from operator import itemgetter

Pair = tuple[bytes, bytes]

_first = itemgetter(0)
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


def read_below(records: Iterable[Pair], upper: bytes | None, inclusive: bool) -> list[Pair]:
    """The ascending `records` up to `upper`, or all of them when it is `None`."""
    if upper is None:
        return list(records)
    return take_while_below(iter(records), upper, inclusive)[0]


def read_at_least(records: Iterable[Pair], lower: bytes | None) -> list[Pair]:
    """The descending `records` down to `lower` (inclusive), or all of them when it is `None`."""
    if lower is None:
        return list(records)
    return take_while_at_least(iter(records), lower)[0]


def first_of(records: Iterator[Pair], limit: int | None) -> Iterator[Pair]:
    """`records`, or their first `limit` (a range read stopped early)."""
    return records if limit is None else itertools.islice(records, limit)
