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


def encode_window_key(key: bytes, window_start: int) -> bytes:
    """`key` followed by the window start as 8 order-preserving bytes (key, then time order)."""
    return key + _U64.pack(window_start + _SIGN_BIT)


def decode_window_key(data: bytes) -> tuple[bytes, int]:
    """The `(key, window_start)` that `encode_window_key` encoded."""
    if len(data) < 8:
        raise ValueError(f"a window key needs at least 8 bytes, got {len(data)}")
    return data[:-8], int(_U64.unpack(data[-8:])[0]) - _SIGN_BIT
