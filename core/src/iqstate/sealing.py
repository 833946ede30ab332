"""A checksum on every stored value, for engines whose storage keeps none of its own (LMDB,
SQLite): a damaged page would otherwise be served as a successful answer.

Each value is stored followed by the CRC-32 of its key and value (4 bytes, little-endian),
so damage to either is found when the record is read. With the CRC appended that way, the
CRC-32 of key, value and tag together is a constant (`RESIDUE`), so checking a record
costs one CRC over what was read. Stores written before sealing are sealed once, in one
transaction, when first opened (`FORMAT` marks a sealed store).

`seal`, `seal_pairs`, `unseal`, `unseal_all`, `unseal_below` and `unseal_at_least` are
`iqstate-speedups`' C functions where it is built (one call for a record or a whole scan,
no Python step per record), else the Python definitions below; both take bytes-like keys
and values, compute the same bytes and give the same answers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from operator import add, itemgetter
from zlib import crc32

from iqstate.scanning import read_at_least, read_below

FORMAT_KEY = b"format"
FORMAT = b"sealed-crc32"
RESIDUE = 0x2144DF1C
"""CRC-32 of any message followed by its own CRC-32 in little-endian order."""
TAG = 4
"""The length of the CRC-32 after each stored value."""

Pair = tuple[bytes, bytes]
_second = itemgetter(1)


def _seal(key: bytes, value: bytes) -> bytes:
    """`value` as stored: followed by the checksum of `key` and `value`."""
    return b"".join((value, crc32(value, crc32(key)).to_bytes(TAG, "little")))


def _seal_pairs(pairs: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """`(key, seal(key, value))` for each pair, a `None` value (a delete) left as it is."""
    return [(key, None if value is None else _seal(key, value)) for key, value in pairs]


def _unseal(key: bytes, stored: bytes) -> bytes | None:
    """The value stored under `key`, or `None` when the checksum does not match."""
    if crc32(stored, crc32(key)) != RESIDUE or len(stored) < TAG:
        return None
    return stored[:-TAG]


def _unseal_all(pairs: list[Pair]) -> list[Pair] | None:
    """The values sealed in `pairs`, or `None` when any record's checksum fails (then
    check them one by one to name it). Each record is checked as `unseal` checks it, the
    CRCs through C-level maps instead of a Python step each."""
    checks = list(map(crc32, itertools.starmap(add, pairs)))
    if (
        checks.count(RESIDUE) != len(checks)
        or min(map(len, map(_second, pairs)), default=TAG) < TAG
    ):
        return None
    return [(key, stored[:-TAG]) for key, stored in pairs]


def _unseal_below(
    records: Iterable[Pair], upper: bytes | None, inclusive: bool
) -> list[Pair] | None:
    """The records of the ascending `records` up to `upper` (to the end when `None`),
    unsealed; `None` when any record's checksum fails. An engine's cursor goes in as it is:
    the compiled function reads, bounds and checks it in one call."""
    return _unseal_all(read_below(records, upper, inclusive))


def _unseal_at_least(records: Iterable[Pair], lower: bytes | None) -> list[Pair] | None:
    """The records of the descending `records` down to `lower` (inclusive; to the end when
    `None`), unsealed; `None` when any record's checksum fails."""
    return _unseal_all(read_at_least(records, lower))


PYTHON = (_seal, _seal_pairs, _unseal, _unseal_all, _unseal_below, _unseal_at_least)
"""The pure-Python definitions, whether or not the compiled ones are in use (for tests)."""

seal: Callable[[bytes, bytes], bytes]
seal_pairs: Callable[[Iterable[tuple[bytes, bytes | None]]], list[tuple[bytes, bytes | None]]]
unseal: Callable[[bytes, bytes], bytes | None]
unseal_all: Callable[[list[Pair]], list[Pair] | None]
unseal_below: Callable[[Iterable[Pair], bytes | None, bool], list[Pair] | None]
unseal_at_least: Callable[[Iterable[Pair], bytes | None], list[Pair] | None]
try:
    from iqstate_speedups.sealing import (
        seal,
        seal_pairs,
        unseal,
        unseal_all,
        unseal_at_least,
        unseal_below,
    )
except ImportError:  # not built here: the same answers in Python
    seal, seal_pairs, unseal, unseal_all, unseal_below, unseal_at_least = PYTHON
COMPILED = seal is not _seal
"""Whether the C functions of `iqstate-speedups` are in use."""
