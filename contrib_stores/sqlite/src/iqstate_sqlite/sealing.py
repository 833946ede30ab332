"""A checksum on every stored value: SQLite keeps no checksums of its pages, and damage would
otherwise be served as a successful answer.

Each value is stored followed by the CRC-32 of its key and value (4 bytes, big-endian), so
damage to either is found when the record is read. Stores written before sealing are
sealed once, in one transaction, when first opened (`FORMAT` marks a sealed store).
"""

from __future__ import annotations

import zlib

FORMAT_KEY = b"format"
FORMAT = b"sealed-crc32"
_TAG = 4


def seal(key: bytes, value: bytes) -> bytes:
    """`value` as stored: followed by the checksum of `key` and `value`."""
    return value + zlib.crc32(value, zlib.crc32(key)).to_bytes(_TAG, "big")


def unseal(key: bytes, stored: bytes) -> bytes | None:
    """The value stored under `key`, or `None` when the checksum does not match."""
    value = stored[:-_TAG]
    if len(stored) < _TAG or zlib.crc32(value, zlib.crc32(key)) != int.from_bytes(
        stored[-_TAG:], "big"
    ):
        return None
    return value
