"""Helpers for ordered byte keys shared by engines and layers."""

from __future__ import annotations

import struct

_SIGN_BIT = 1 << 63
_U64 = struct.Struct(">Q")


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The least byte string greater than every string starting with `prefix` (`None`: none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def time_index_upper(prefix: bytes, limit: int) -> bytes:
    """An inclusive upper bound for a range over index keys `prefix + time + rest` (the time
    as 8 order-preserving bytes, `rest` never empty): above every key with a time at or
    before `limit`, whatever its rest, and below the others. (`prefix + time(limit) +
    0xff` is not: a rest of 0xff and more sorts above it.)"""
    if limit >= _SIGN_BIT - 1:
        upper = prefix_upper_bound(prefix)
        assert upper is not None, "an index prefix is never all 0xff"
        return upper
    return prefix + _U64.pack(limit + 1 + _SIGN_BIT)


def encode_window_key(key: bytes, window_start: int) -> bytes:
    """`key` followed by the window start as 8 order-preserving bytes (key, then time order)."""
    return key + _U64.pack(window_start + _SIGN_BIT)


def decode_window_key(data: bytes) -> tuple[bytes, int]:
    """The `(key, window_start)` that `encode_window_key` encoded."""
    if len(data) < 8:
        raise ValueError(f"a window key needs at least 8 bytes, got {len(data)}")
    return data[:-8], int(_U64.unpack(data[-8:])[0]) - _SIGN_BIT
