"""A checksum on every stored value, for engines whose storage keeps none of its own (LMDB,
SQLite): a damaged page would otherwise be served as a successful answer.

Each value is stored followed by the CRC-32 of its key and value (4 bytes, little-endian),
so damage to either is found when the record is read. With the CRC appended that way, the
CRC-32 of key, value and tag together is a constant (`RESIDUE`), so checking a record
costs one CRC over what was read. Stores written before sealing are sealed once, in one
transaction, when first opened (`FORMAT` marks a sealed store).
"""

from __future__ import annotations

from zlib import crc32

FORMAT_KEY = b"format"
FORMAT = b"sealed-crc32"
RESIDUE = 0x2144DF1C
"""CRC-32 of any message followed by its own CRC-32 in little-endian order."""
_TAG = 4


def seal(key: bytes, value: bytes) -> bytes:
    """`value` as stored: followed by the checksum of `key` and `value`."""
    return value + crc32(value, crc32(key)).to_bytes(_TAG, "little")


def unseal(key: bytes, stored: bytes) -> bytes | None:
    """The value stored under `key`, or `None` when the checksum does not match."""
    if crc32(stored, crc32(key)) != RESIDUE or len(stored) < _TAG:
        return None
    return stored[:-_TAG]
