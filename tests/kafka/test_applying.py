"""Folding consecutive changelog units into one store commit leaves a replica exactly as
applying them one by one does: data, position, fence and committed offset. Checked with real
hosted partitions (the follower's seam in core) over generated changelogs with replays,
batches that cover different source partitions, batches without id, records of an applied
batch arriving late, and incomplete units."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from iqstate_kafka.applying import fold
from iqstate_kafka.format import BatchMarker, DataRecord
from iqstate_kafka.reader import ChangelogUnit

from iqstate import Application, Position, PositionBound, QueryConfig, RangeQuery, TopicPartition
from iqstate.context import StateStoreContext
from iqstate.plugins import default_registry
from iqstate.runtime import ACTIVE
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import StoreSpec

TP = TopicPartition("app-s-changelog", 0)
SPEC: StoreSpec = Application("app", Path("unused")).key_value_store(
    "s", 1, key_serde="bytes", value_serde="bytes"
)


def replica() -> HostedPartition:
    """A followed in-memory store partition, open."""
    context = StateStoreContext(
        application_id="app",
        store_name="s",
        partition=0,
        changelog_partition=TP,
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(SPEC, 0, ACTIVE, context, followed=True)
    hosted.open()
    return hosted


def state(hosted: HostedPartition) -> tuple[Any, ...]:
    result = hosted.chain.query(
        RangeQuery.with_no_bounds(), PositionBound.unbounded(), QueryConfig.DEFAULT
    )
    data = sorted(result.result)
    return data, hosted.chain.position, hosted.fence, hosted.committed_changelog_offset()


@st.composite
def changelogs(draw: st.DrawFn) -> list[ChangelogUnit]:
    """Units as the reader hands them out, with offsets counting records and markers."""
    units = []
    offset = 0
    for _ in range(draw(st.integers(1, 8))):
        batch_id = draw(st.none() | st.integers(0, 6))
        records = []
        for _ in range(draw(st.integers(0, 4))):
            key = draw(st.sampled_from([b"a", b"b", b"c"]))
            value = draw(st.none() | st.binary(min_size=1, max_size=2))
            late = draw(st.booleans()) and batch_id is not None and batch_id > 0
            records.append(DataRecord(key, value, batch_id - 1 if late else batch_id, offset))
            offset += 1
        marker = None
        if draw(st.integers(0, 5)):  # mostly complete units, sometimes incomplete ones
            source = draw(st.sampled_from(["x", "y"]))
            position = Position.from_map({source: {0: draw(st.integers(0, 50))}})
            marker = BatchMarker(batch_id, position, offset)
            offset += 1
        units.append(ChangelogUnit(TP, records, marker, offset))
    return units


@given(changelogs(), st.lists(st.integers(1, 4), min_size=1, max_size=8))
def test_a_fold_commits_what_applying_each_unit_would(
    units: list[ChangelogUnit], sizes: list[int]
) -> None:
    one_by_one, folded = replica(), replica()
    for unit in units:
        marker = unit.marker
        one_by_one.apply_changelog(
            unit.entries(one_by_one.fence),
            marker.batch_id if marker else None,
            marker.position if marker else None,
            unit.next_offset,
        )
    start = 0
    while start < len(units):
        chunk = units[start : start + sizes[start % len(sizes)]]
        commit = fold(chunk, folded.fence)
        folded.apply_changelog(commit.entries, commit.batch_id, commit.position, commit.next_offset)
        start += len(chunk)
    assert state(folded) == state(one_by_one)


def test_positions_of_batches_covering_different_sources_are_merged() -> None:
    units = [
        ChangelogUnit(TP, [], BatchMarker(1, Position.from_map({"x": {0: 5}}), 0), 1),
        ChangelogUnit(TP, [], BatchMarker(2, Position.from_map({"y": {3: 7}}), 1), 2),
    ]
    commit = fold(units, None)
    assert commit.position == Position.from_map({"x": {0: 5}, "y": {3: 7}})
    assert (commit.batch_id, commit.next_offset) == (2, 2)


def test_a_fold_needs_a_unit() -> None:
    with pytest.raises(ValueError, match="at least one unit"):
        fold([], None)
