"""Binary encodings engines use to keep offsets and positions inside their own storage.

`encode_position` is Kafka's `PositionSerde` version 0 (big-endian: a version byte, the
topic count, then per topic its UTF-8 name, its partition count and `(partition, offset)`
pairs); `decode_position` ignores trailing bytes, as Kafka's decoder must.
"""

from __future__ import annotations

import struct

from iqstate.errors import CorruptStateError
from iqstate.position import Position, TopicPartition

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PAIR = struct.Struct(">iq")
_POSITION_VERSION = 0


def encode_position(position: Position) -> bytes:
    parts = [bytes([_POSITION_VERSION]), _I32.pack(len(position.topics()))]
    for topic in sorted(position.topics()):
        name = topic.encode("utf-8")
        offsets = position.partition_offsets(topic)
        parts += [_I32.pack(len(name)), name, _I32.pack(len(offsets))]
        parts += [_PAIR.pack(partition, offset) for partition, offset in sorted(offsets.items())]
    return b"".join(parts)


def decode_position(data: bytes) -> Position:
    try:
        if data[0] != _POSITION_VERSION:
            raise ValueError(f"unknown version {data[0]}")
        (topics,), cursor = _I32.unpack_from(data, 1), 5
        components: dict[str, dict[int, int]] = {}
        for _ in range(topics):
            (length,) = _I32.unpack_from(data, cursor)
            cursor += 4
            topic = data[cursor : cursor + length].decode("utf-8")
            cursor += length
            (pairs,) = _I32.unpack_from(data, cursor)
            cursor += 4
            offsets = components.setdefault(topic, {})
            for _ in range(pairs):
                partition, offset = _PAIR.unpack_from(data, cursor)
                cursor += _PAIR.size
                offsets[partition] = offset
        return Position.from_map(components)
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CorruptStateError(f"stored position is corrupt: {exc}") from exc


def encode_offset(offset: int) -> bytes:
    return _I64.pack(offset)


def decode_offset(data: bytes) -> int:
    if len(data) != 8:
        raise CorruptStateError(f"a stored offset has {len(data)} bytes instead of 8")
    return int(_I64.unpack(data)[0])


def offset_key(partition: TopicPartition) -> bytes:
    """`"<topic>-<partition>"`, as Kafka keys its offsets column family."""
    return f"{partition.topic}-{partition.partition}".encode()


def parse_offset_key(key: bytes) -> TopicPartition:
    topic, _, number = key.decode("utf-8").rpartition("-")
    if not topic or not number.isdigit():
        raise CorruptStateError(f"stored offset key {key!r} is not '<topic>-<partition>'")
    return TopicPartition(topic, int(number))
