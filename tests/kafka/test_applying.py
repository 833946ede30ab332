"""Folding consecutive changelog units into one store commit leaves a replica exactly as
applying them one by one does: data, position, fence and committed offset. Checked with real
hosted partitions (the follower's seam in core) over generated changelogs with replays,
batches that cover different source partitions, batches without id, records of another
batch than their marker's, gaps, compacted stretches and incomplete units. Then the rules a
follower applies to hostile or broken records: markers that skip ahead, stray records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from iqstate_kafka.applying import BEHIND, GAP, STRAY, fold
from iqstate_kafka.format import BatchMarker, DataRecord
from iqstate_kafka.reader import ChangelogUnit

from iqstate import (
    Application,
    ChangeBatch,
    Position,
    PositionBound,
    QueryConfig,
    RangeQuery,
    TopicPartition,
)
from iqstate.context import StateStoreContext
from iqstate.plugins import default_registry
from iqstate.runtime import ACTIVE, ACTIVE_RESTORING
from iqstate.runtime.changelog_topic import TopicIds
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.subscription import Subscription

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
        batch_id = draw(st.none() | st.integers(0, 9))
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
            marker = BatchMarker(batch_id, position, offset, draw(st.booleans()))
            offset += 1
        units.append(ChangelogUnit.of(TP, records, marker, offset, draw(st.booleans())))
    return units


@given(changelogs(), st.lists(st.integers(1, 4), min_size=1, max_size=8))
def test_a_fold_commits_what_applying_each_unit_would(
    units: list[ChangelogUnit], sizes: list[int]
) -> None:
    one_by_one, folded = replica(), replica()
    refused_one_by_one, refused_folded = [], []
    for unit in units:
        commit = fold([unit], one_by_one.fence)
        one_by_one.apply_changelog(
            commit.entries, commit.batch_id, commit.position, commit.next_offset
        )
        refused_one_by_one += commit.refused
    start = 0
    while start < len(units):
        chunk = units[start : start + sizes[start % len(sizes)]]
        commit = fold(chunk, folded.fence)
        folded.apply_changelog(commit.entries, commit.batch_id, commit.position, commit.next_offset)
        refused_folded += commit.refused
        start += len(chunk)
    assert state(folded) == state(one_by_one)
    assert refused_folded == refused_one_by_one


@given(changelogs(), st.lists(st.integers(1, 4), min_size=1, max_size=8))
def test_subscribers_see_each_batch_of_a_fold_as_applying_each_unit_would(
    units: list[ChangelogUnit], sizes: list[int]
) -> None:
    """A replica catching up commits several batches at once, and its subscribers still
    get each batch on its own, at its own position and cursor, as unit by unit."""
    one_by_one, folded = replica(), replica()
    everything = KeyFilter.build(SPEC, None, None, None, None)
    watching = [
        Subscription("app", SPEC, {0: hosted}, keys=everything) for hosted in (one_by_one, folded)
    ]
    for unit_ in units:
        commit = fold([unit_], one_by_one.fence)
        one_by_one.apply_changelog(
            commit.entries, commit.batch_id, commit.position, commit.next_offset
        )
    start = 0
    while start < len(units):
        chunk = units[start : start + sizes[start % len(sizes)]]
        commit = fold(chunk, folded.fence)
        folded.apply_changelog(
            commit.entries,
            commit.batch_id,
            commit.position,
            commit.next_offset,
            [(batch.end, batch.position, batch.next_offset) for batch in commit.batches],
        )
        start += len(chunk)

    def seen(subscription: Subscription) -> list[ChangeBatch]:
        batches = []
        while (batch := subscription.poll()) is not None:
            batches.append(batch)
        return batches

    assert seen(watching[1]) == seen(watching[0])


def test_entries_kept_by_a_filter_keep_their_batches() -> None:
    first = unit([(b"a", 1), (b"bad", 1)], 1, 0)
    second = unit([(b"bad", 2), (b"c", 2)], 2, 3)
    commit = fold([first, second], 0)
    assert [(b.end, b.next_offset) for b in commit.batches] == [(2, 3), (4, 6)]
    kept = commit.keeping(lambda key, value: key != b"bad")
    assert kept.entries == [(b"a", b"a"), (b"c", b"c")]
    assert [(b.end, b.position, b.next_offset) for b in kept.batches] == [
        (1, first.marker.position, 3),  # type: ignore[union-attr]
        (2, second.marker.position, 6),  # type: ignore[union-attr]
    ]
    assert (kept.batch_id, kept.position, kept.next_offset) == (2, commit.position, 6)


def unit(
    records: list[tuple[bytes, int | None]],
    batch_id: int | None,
    start: int,
    *,
    compacted: bool = False,
    allows_gap: bool = False,
) -> ChangelogUnit:
    """Records `(key, batch id)` at offsets from `start` (value = the key), then a marker."""
    data = [DataRecord(key, key, bid, start + i) for i, (key, bid) in enumerate(records)]
    end = start + len(data)
    marker = BatchMarker(batch_id, Position.from_map({"src": {0: end}}), end, allows_gap)
    return ChangelogUnit.of(TP, data, marker, end + 1, compacted)


def test_a_marker_that_skips_ahead_is_refused_and_later_batches_still_apply() -> None:
    forged = unit([(b"evil", 2**63 - 1)], 2**63 - 1, 10)
    commit = fold([forged], 4)
    assert (commit.entries, commit.batch_id, commit.position) == ([], None, None)
    assert [(r.reason, r.offset) for r in commit.refused] == [(GAP, 11), (GAP, 10)]
    assert commit.next_offset == 12  # read past, never again
    legit = fold([unit([(b"k", 5)], 5, 12)], 4)
    assert (legit.entries, legit.batch_id, legit.refused) == ([(b"k", b"k")], 5, ())


def test_gaps_that_a_writer_allowed_or_compaction_explains_are_accepted() -> None:
    allowed = fold([unit([(b"k", 9)], 9, 10, allows_gap=True)], 4)
    assert (allowed.entries, allowed.batch_id, allowed.refused) == ([(b"k", b"k")], 9, ())
    # Compaction removed batches 5..8's markers (and some records): their surviving records
    # are applied with batch 9's marker; a replayed batch's record is skipped.
    compacted = unit([(b"a", 5), (b"b", 7), (b"old", 3), (b"c", 9)], 9, 10, compacted=True)
    commit = fold([compacted], 4)
    assert commit.entries == [(b"a", b"a"), (b"b", b"b"), (b"c", b"c")]
    assert (commit.batch_id, commit.refused) == (9, ())


def test_records_of_a_batch_without_a_marker_are_never_applied() -> None:
    # Batch 6 was abandoned (data, no marker); a stray record claims no batch; batch 7's
    # marker (allowed to skip 6) applies only batch 7's records.
    strays = unit([(b"x", 6), (b"y", None), (b"k", 7), (b"z", 8)], 7, 20, allows_gap=True)
    commit = fold([strays], 5)
    assert (commit.entries, commit.batch_id) == ([(b"k", b"k")], 7)
    assert [(r.reason, r.offset) for r in commit.refused] == [
        (STRAY, 20), (STRAY, 21), (STRAY, 23),
    ]  # fmt: skip
    # A replayed batch's marker applies nothing; a newer record before it is a stray.
    replay = fold([unit([(b"k", 5), (b"new", 6)], 5, 30)], 5)
    assert (replay.entries, [r.reason for r in replay.refused]) == ([], [STRAY])


def test_a_batch_older_than_the_fence_is_skipped_and_reported() -> None:
    # A query restarted with a new checkpoint writes batch 0 after batch 5: applying it
    # would roll the partition back, so it is skipped, but reported (a replay of batch 5
    # is not, and batch 6 applies).
    restarted = unit([(b"new", 0), (b"newer", 0)], 0, 40)
    replay = unit([(b"k", 5)], 5, 43)
    following = unit([(b"next", 6)], 6, 45)
    commit = fold([restarted, replay, following], 5)
    assert (commit.entries, commit.batch_id) == ([(b"next", b"next")], 6)
    assert [(r.reason, r.offset) for r in commit.refused] == [
        (BEHIND, 42), (BEHIND, 40), (BEHIND, 41),
    ]  # fmt: skip
    assert "new checkpoint" in commit.refused[0].detail
    assert "last batch 5" in commit.refused[0].detail


def test_positions_of_batches_covering_different_sources_are_merged() -> None:
    units = [
        ChangelogUnit.of(TP, [], BatchMarker(1, Position.from_map({"x": {0: 5}}), 0), 1),
        ChangelogUnit.of(TP, [], BatchMarker(2, Position.from_map({"y": {3: 7}}), 1), 2),
    ]
    commit = fold(units, None)
    assert commit.position == Position.from_map({"x": {0: 5}, "y": {3: 7}})
    assert (commit.batch_id, commit.next_offset) == (2, 2)


def test_a_fold_needs_a_unit() -> None:
    with pytest.raises(ValueError, match="at least one unit"):
        fold([], None)


def test_a_commit_that_fails_leaves_nothing_behind(tmp_path: Path) -> None:
    # A writer of another engine wrote a key LMDB cannot keep (over 511 bytes): the
    # replica's commit fails. Queries must not see that unit's data or position (they were
    # never committed), and the follower's retry, from the committed offset, must not
    # carry the key that failed it along.
    from iqstate_lmdb import LMDBKeySizeError

    hosted = lmdb_replica(tmp_path)
    first, second = Position.from_map({"src": {0: 1}}), Position.from_map({"src": {0: 2}})
    hosted.apply_changelog([(b"a", b"1")], 1, first, 2)
    with pytest.raises(LMDBKeySizeError):
        hosted.apply_changelog([(b"b", b"2"), (b"x" * 600, b"3")], 2, second, 5)
    assert state(hosted) == ([(b"a", b"1")], first, 1, 2)
    hosted.apply_changelog([(b"b", b"2")], 2, second, 5)  # the unit without that record
    assert state(hosted) == ([(b"a", b"1"), (b"b", b"2")], second, 2, 5)
    hosted.close()


def test_a_rebuilt_running_active_restores_until_it_catches_up_again(tmp_path: Path) -> None:
    # Its changelog no longer held where it stood: emptied to be rebuilt, it must not answer
    # queries that need a running active from a partly restored store.
    hosted = lmdb_replica(tmp_path)
    hosted.apply_changelog([(b"a", b"1")], 1, Position.from_map({"src": {0: 1}}), 2)
    assert hosted.role.is_running_active
    hosted.rebuild(TopicIds())
    assert hosted.role == ACTIVE_RESTORING
    assert state(hosted) == ([], Position.empty(), None, None)
    hosted.close()


def lmdb_replica(tmp_path: Path) -> HostedPartition:
    """A followed LMDB store partition, running active, open."""
    spec = Application("app", tmp_path).key_value_store(
        "l", 1, engine="lmdb", key_serde="bytes", value_serde="bytes"
    )
    directory = tmp_path / "l-0"
    directory.mkdir()
    context = StateStoreContext(
        application_id="app",
        store_name="l",
        partition=0,
        directory=directory,
        changelog_partition=TP,
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(spec, 0, ACTIVE, context, followed=True)
    hosted.open()
    return hosted
