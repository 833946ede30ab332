"""Positions from the checkpoint's offsets files, in both formats Spark writes: `v1`
(offsets in source order) and `v2` (`<source id>:<offset>` per line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from iqstate_spark.offsets import batch_position

from iqstate import Position
from iqstate.errors import CorruptStateError

TOPICS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-.", min_size=1, max_size=12)
KAFKA_OFFSETS = st.dictionaries(
    TOPICS,
    st.dictionaries(st.integers(0, 63), st.integers(0, 2**62), min_size=1, max_size=4),
    min_size=1,
    max_size=3,
)


def write(checkpoint: Path, batch: int, version: str, *lines: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    body = "\n".join([version, '{"batchWatermarkMs":0}', *lines]) + "\n"
    (checkpoint / "offsets" / str(batch)).write_text(body)


@settings(max_examples=60, deadline=None)
@given(offsets=KAFKA_OFFSETS)
def test_kafka_offsets_are_the_position_in_either_format(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict[str, dict[int, int]]
) -> None:
    checkpoint = tmp_path_factory.mktemp("checkpoint")
    line = json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()})
    write(checkpoint, 0, "v1", line)
    write(checkpoint, 1, "v2", f"0:{line}")
    expected = Position.from_map(offsets)
    assert batch_position(checkpoint, 0) == expected
    assert batch_position(checkpoint, 1) == expected


def test_v2_names_other_sources_by_their_id(tmp_path: Path) -> None:
    write(tmp_path, 3, "v2", 'files:{"logOffset":12}', "idle:-", 'events:{"in":{"0":5}}')
    position = batch_position(tmp_path, 3)
    assert position == Position.from_map({"files": {0: 12}, "in": {0: 5}})
    assert batch_position(tmp_path, 3, ["named"]) == Position.from_map(
        {"named": {0: 12}, "in": {0: 5}}
    )


def test_two_sources_of_one_topic_give_the_offsets_both_have_read(tmp_path: Path) -> None:
    """A self-join reads one topic through two sources at different offsets: the store
    holds both up to the lower one (the higher would meet a bound too early)."""
    write(tmp_path, 0, "v1", '{"in":{"0":50,"1":7}}', '{"in":{"0":40,"2":3}}')
    assert batch_position(tmp_path, 0) == Position.from_map({"in": {0: 40, 1: 7, 2: 3}})


def test_broken_offsets_files_are_refused_naming_the_file(tmp_path: Path) -> None:
    write(tmp_path, 0, "v2", '{"in":{"0":5}}')
    with pytest.raises(CorruptStateError, match="expected '<source id>:<offset>'"):
        batch_position(tmp_path, 0)
    write(tmp_path, 1, "vX", '{"in":{"0":5}}')
    with pytest.raises(CorruptStateError, match="is not a Spark offsets file"):
        batch_position(tmp_path, 1)
