"""The changelog record format: what writers put in a record and what followers get back."""

from __future__ import annotations

import struct

import pytest
from iqstate_kafka import ChangelogFormatError
from iqstate_kafka.format import (
    BATCH_HEADER,
    MARKER_KEY,
    BatchMarker,
    DataRecord,
    batch_headers,
    data_key,
    decode,
    is_fenced,
    marker_value,
    window_data_key,
)

from iqstate import Position, Serdes
from iqstate.codec import encode_position
from iqstate.keyspace import decode_window_key, encode_window_key

POSITION = Position.from_map({"events": {0: 41, 1: 7}, "clicks": {3: 2}})


def decode_at(key: bytes | None, value: bytes | None, headers: object) -> object:
    return decode("app-s-changelog", 3, 17, key, value, headers)  # type: ignore[arg-type]


def test_data_record_round_trip() -> None:
    record = decode_at(data_key(b"user-1"), b'{"n": 1}', batch_headers(12))
    assert record == DataRecord(b"user-1", b'{"n": 1}', 12, 17)


def test_tombstone_and_batch_without_id() -> None:
    assert decode_at(b"user-1", None, batch_headers(None)) == DataRecord(b"user-1", None, None, 17)


def test_window_record_keys_are_the_engines_window_keys() -> None:
    key = window_data_key(b"sensor", -3_000)
    assert key == encode_window_key(b"sensor", -3_000)
    assert decode_window_key(decode_at(key, b"v", batch_headers(1)).key) == (b"sensor", -3_000)  # type: ignore[attr-defined]


def test_marker_round_trip() -> None:
    assert decode_at(MARKER_KEY, marker_value(5, POSITION), None) == BatchMarker(5, POSITION, 17)
    assert decode_at(MARKER_KEY, marker_value(None, Position.empty()), None) == BatchMarker(
        None, Position.empty(), 17
    )


def test_the_marker_key_is_refused_as_data() -> None:
    with pytest.raises(ValueError, match="reserved for the changelog's batch markers"):
        data_key(MARKER_KEY)
    key, window_start = decode_window_key(MARKER_KEY)
    with pytest.raises(ValueError, match="reserved for the changelog's batch markers"):
        window_data_key(key, window_start)


def test_no_built_in_serde_makes_the_marker_key() -> None:
    """Not UTF-8 (string and JSON keys are), and neither 8 nor 16 bytes (int64 and float64
    keys, alone or in a window key, are)."""
    with pytest.raises(Exception, match="decode"):
        Serdes.string().deserialize(MARKER_KEY)
    with pytest.raises(UnicodeDecodeError):
        MARKER_KEY[:-8].decode("utf-8")
    assert len(MARKER_KEY) not in (8, 16)


@pytest.mark.parametrize("batch_id", [-1, True, 1.5, "3"])
def test_batch_ids_are_ints_from_zero(batch_id: object) -> None:
    with pytest.raises(ValueError, match="batch_id must be an int >= 0 or None"):
        batch_headers(batch_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_id must be an int >= 0 or None"):
        marker_value(batch_id, POSITION)  # type: ignore[arg-type]


def _batch(version: int, batch_id: int) -> bytes:
    return struct.pack(">Bq", version, batch_id)


@pytest.mark.parametrize(
    ("key", "value", "headers", "problem"),
    [
        (None, b"v", batch_headers(1), "it has no key"),
        (b"k", b"v", None, f"no {BATCH_HEADER} header"),
        (b"k", b"v", [("other", b"x")], f"no {BATCH_HEADER} header"),
        (b"k", b"v", [(BATCH_HEADER, None)], f"no {BATCH_HEADER} header with a binary value"),
        (b"k", b"v", batch_headers(1) * 2, f"2 {BATCH_HEADER} headers"),
        (b"k", b"v", [(BATCH_HEADER, b"\x01\x00")], "the header has 2 bytes, not 9"),
        (b"k", b"v", [(BATCH_HEADER, _batch(1, 1) + b"junk")], "the header has 13 bytes, not 9"),
        (b"k", b"v", [(BATCH_HEADER, _batch(2, 1))], "the header has format version 2, not 1"),
        (b"k", b"v", [(BATCH_HEADER, _batch(1, -7))], "the header has the negative batch id -7"),
        (MARKER_KEY, None, None, "a batch marker without value"),
        (MARKER_KEY, _batch(9, 1) + encode_position(POSITION), None, "format version 9, not 1"),
        (MARKER_KEY, _batch(1, 1) + b"\x00\x00", None, "stored position is corrupt"),
    ],
)
def test_undecodable_records_name_topic_partition_offset(
    key: bytes | None, value: bytes | None, headers: object, problem: str
) -> None:
    with pytest.raises(ChangelogFormatError) as caught:
        decode_at(key, value, headers)
    assert str(caught.value).startswith(
        "changelog record at app-s-changelog partition 3 offset 17 does not decode: "
    )
    assert problem in str(caught.value)
    assert (caught.value.topic, caught.value.partition, caught.value.offset) == (
        "app-s-changelog",
        3,
        17,
    )


@pytest.mark.parametrize(
    ("batch_id", "fence", "fenced"),
    [(4, 5, True), (5, 5, True), (6, 5, False), (5, None, False), (None, 5, False)],
)
def test_fencing_rule(batch_id: int | None, fence: int | None, fenced: bool) -> None:
    """A batch at or below the last applied one is skipped; without ids nothing is."""
    assert is_fenced(batch_id, fence) is fenced
