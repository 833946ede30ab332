"""The changelog record format (SPEC 9): the one definition writers and followers share.

A changelog partition holds, per batch, that batch's data records and then one batch marker.

**Data record**: key = the store's serialized key (window stores:
`iqstate.keyspace.encode_window_key(key, window_start)`, the order the engines keep);
value = the serialized value, or null for a delete (a tombstone, which compaction removes);
one header `iqstate.batch` = the format version byte, then the batch id as a big-endian
signed 64-bit integer (-1: a batch without id, which nothing fences).

**Batch marker**: key = `MARKER_KEY`; value = the format version byte, the batch id (as in
the header), then the batch's source position in Kafka's `PositionSerde` encoding
(`iqstate.codec.encode_position`). No headers, except `iqstate.allow-gaps` (value `1`) on
the markers of a batch written with `allow_gaps`: its id may skip ids after the previous
batch (followers refuse a marker that skips ahead otherwise). A partition's position
advances only at a marker, so a follower sees it before or after a batch, never inside one.

**Why this marker key.** Compacted topics need a non-null key, and compaction keeps only the
latest record per key, so a marker must never share its key with a data record: a later marker
would erase that key's value. Data keys are whatever a serde makes, so no key is reserved by
nature; this one is chosen so that no built-in serde can produce it and refused for
everything else: `b"\\xffiqstate.batch-marker\\xff"` is 23 bytes, not valid UTF-8 (0xff never
occurs in UTF-8), and not 8 or 16 bytes long. So no string or JSON key, no 8-byte int64 or
float64 key, and no window key made of them (UTF-8 + 8 bytes, or 16 bytes) equals it; a
bytes-serde or custom key that does is refused by `data_key` before anything is written.
One key per partition also means compaction keeps only a partition's latest marker: older
batches' markers go, their data stays, and the latest marker still carries the position
the compacted data reflects.

**Expiry tombstone**: key = a window's, session's or version's data key; value = null; one
header `iqstate.expired` = the format version byte. The active replica of a window, session
or versioned store writes one for each window, session or version its retention drops
(`iqstate_kafka.expiry`): no writer knows which of them a store holds, and each is a key
of its own, so without it compaction would keep every one ever written. Followers skip
these records (every replica expires the same ones itself); compaction uses them.

The version byte comes first in every value iqstate writes, so the format can evolve; a
reader refuses versions it does not know. Nothing is ever deserialized with pickle.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, NamedTuple

from iqstate.codec import decode_position, encode_position
from iqstate.errors import CorruptStateError
from iqstate.keyspace import encode_window_key
from iqstate.position import Position
from iqstate_kafka.errors import ChangelogFormatError

FORMAT_VERSION = 1
BATCH_HEADER = "iqstate.batch"
ALLOW_GAPS_HEADER = "iqstate.allow-gaps"
EXPIRY_HEADER = "iqstate.expired"
EXPIRY_HEADERS: list[tuple[str, str | bytes | None]] = [(EXPIRY_HEADER, bytes([FORMAT_VERSION]))]
"""The headers of an expiry tombstone."""
MARKER_KEY = b"\xffiqstate.batch-marker\xff"
_NO_BATCH = -1
_BATCH = struct.Struct(">Bq")


class DataRecord(NamedTuple):
    """A decoded data record: `value` is `None` for a delete; `batch_id` `None` for none."""

    key: bytes
    value: bytes | None
    batch_id: int | None
    offset: int


@dataclass(frozen=True, slots=True)
class BatchMarker:
    """A decoded batch marker: the end of a batch in one changelog partition."""

    batch_id: int | None
    position: Position
    offset: int
    allows_gap: bool = False
    """The writer said the batch id may skip ids after the previous batch (`allow_gaps`)."""


class ExpiryTombstone(NamedTuple):
    """A decoded expiry tombstone: for compaction only, never applied."""

    key: bytes
    offset: int


def is_fenced(batch_id: int | None, fence: int | None) -> bool:
    """True iff a partition whose last applied batch is `fence` must skip batch `batch_id`.

    The runtime's rule (a batch at or below the fence was applied); no id, no fencing.
    """
    return batch_id is not None and fence is not None and batch_id <= fence


def _batch_bytes(batch_id: int | None) -> bytes:
    if batch_id is None:
        return _BATCH.pack(FORMAT_VERSION, _NO_BATCH)
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ValueError(f"batch_id must be an int >= 0 or None, got {batch_id!r}")
    return _BATCH.pack(FORMAT_VERSION, batch_id)


def batch_headers(batch_id: int | None) -> list[tuple[str, bytes]]:
    """The headers of every data record of batch `batch_id` (build once per batch)."""
    return [(BATCH_HEADER, _batch_bytes(batch_id))]


def marker_headers(allow_gaps: bool) -> list[tuple[str, str | bytes | None]] | None:
    """The headers of a batch's markers (none unless its id may skip ahead)."""
    return [(ALLOW_GAPS_HEADER, b"1")] if allow_gaps else None


def data_key(key: bytes) -> bytes:
    """The record key of a key-value store's serialized `key`; refuses the marker's key."""
    if key == MARKER_KEY:
        raise ValueError(
            f"key {key!r} is reserved for the changelog's batch markers and cannot be stored"
        )
    return key


def window_data_key(key: bytes, window_start: int) -> bytes:
    """The record key of a window store's serialized `key` in the window at `window_start`."""
    return data_key(encode_window_key(key, window_start))


def marker_value(batch_id: int | None, position: Position) -> bytes:
    """The value of a batch marker (its key is `MARKER_KEY`)."""
    return _batch_bytes(batch_id) + encode_position(position)


Headers = list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None
"""Record headers as confluent-kafka gives them (a consumer's are a list)."""

_BATCH_IDS: dict[bytes, int | None] = {}
"""Decoded batch-id bytes: a changelog repeats a batch's header on every record."""
_BATCH_IDS_KEPT = 4096


class Unknown(Enum):
    """`known_batch_id`'s answer for a record it cannot tell about (decode it)."""

    UNKNOWN = "unknown"


UNKNOWN: Final = Unknown.UNKNOWN


def known_batch_id(key: bytes | None, headers: Headers) -> int | Literal[Unknown.UNKNOWN] | None:
    """The batch id of a data record as every writer of this format writes it (a key that
    is not the marker's, one `iqstate.batch` header) whose header bytes `decode` has met
    before; `UNKNOWN` for anything else, which `decode` then decodes or refuses.

    The restore's fast path: a changelog repeats a batch's header on every record, so all
    but the first of a batch's records are known by one lookup.
    """
    if key is None or key == MARKER_KEY or type(headers) is not list or len(headers) != 1:
        return UNKNOWN
    name, found = headers[0]
    if name != BATCH_HEADER or type(found) is not bytes:
        return UNKNOWN
    return _BATCH_IDS.get(found, UNKNOWN)


def decode(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> DataRecord | BatchMarker | ExpiryTombstone:
    """The record at `offset`; `ChangelogFormatError` (naming where) if it does not decode."""
    try:
        if key is None:
            raise ValueError("it has no key")
        if key == MARKER_KEY:
            if value is None:
                raise ValueError("a batch marker without value")
            batch_id = _batch_id(value, "batch marker")
            position = decode_position(value[_BATCH.size :])
            return BatchMarker(batch_id, position, offset, _allows_gap(headers))
        if type(headers) is list and len(headers) == 1 and headers[0][0] == BATCH_HEADER:
            found = headers[0][1]  # what every writer of this format writes
        elif _is_expiry(headers):
            if value is not None:
                raise ValueError("an expiry tombstone with a value")
            return ExpiryTombstone(key, offset)
        else:
            found = _batch_header(headers)
        if not isinstance(found, bytes):
            raise ValueError(f"no {BATCH_HEADER} header with a binary value")
        known = _BATCH_IDS.get(found, UNKNOWN)
        batch_id = _header_batch_id(found) if known is UNKNOWN else known
        return DataRecord(key, value, batch_id, offset)
    except (ValueError, CorruptStateError) as exc:
        raise ChangelogFormatError(topic, partition, offset, str(exc)) from exc


def _is_expiry(headers: Headers) -> bool:
    """Whether `headers` are an expiry tombstone's (its one header, of a known version)."""
    pairs = list(headers.items()) if isinstance(headers, dict) else headers or []
    if not any(name == EXPIRY_HEADER for name, _ in pairs):
        return False
    if len(pairs) != 1 or pairs[0][1] != EXPIRY_HEADERS[0][1]:
        raise ValueError(f"an {EXPIRY_HEADER} header of another version, or with others")
    return True


def _allows_gap(headers: Headers) -> bool:
    if not headers:
        return False
    pairs = headers.items() if isinstance(headers, dict) else headers
    return any(name == ALLOW_GAPS_HEADER and value == b"1" for name, value in pairs)


def _batch_header(headers: Headers) -> str | bytes | None:
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    found = [header for name, header in pairs if name == BATCH_HEADER]
    if len(found) > 1:
        raise ValueError(f"{len(found)} {BATCH_HEADER} headers")
    return found[0] if found else None


def _batch_id(data: bytes, where: str) -> int | None:
    """The batch id at the start of `data` (a header or a marker value), checked."""
    if len(data) < _BATCH.size:
        raise ValueError(f"the {where} has {len(data)} bytes, fewer than {_BATCH.size}")
    version, batch_id = _BATCH.unpack_from(data)
    if version != FORMAT_VERSION:
        raise ValueError(f"the {where} has format version {version}, not {FORMAT_VERSION}")
    if batch_id < _NO_BATCH:
        raise ValueError(f"the {where} has the negative batch id {batch_id}")
    return None if batch_id == _NO_BATCH else int(batch_id)


def _header_batch_id(data: bytes) -> int | None:
    if len(data) != _BATCH.size:  # the marker's value goes on; a header ends there
        raise ValueError(f"the header has {len(data)} bytes, not {_BATCH.size}")
    batch_id = _batch_id(data, "header")
    if len(_BATCH_IDS) >= _BATCH_IDS_KEPT:
        _BATCH_IDS.clear()
    _BATCH_IDS[data] = batch_id
    return batch_id
