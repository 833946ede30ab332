"""`StallWatch`: a reader that reads nothing while a partition is behind is stuck after the
patience; one that moves anywhere, or has nothing to read, never is; a partition that stalls
again and again is given ever longer, up to a bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from iqstate_kafka.stall_watch import StallWatch

STALL_AFTER = 30.0


def test_a_partition_behind_while_nothing_moves_stalls_after_the_patience_not_before() -> None:
    watch: StallWatch[str] = StallWatch(STALL_AFTER, 600.0)
    positions = {"a": 5, "b": 9}
    assert watch.stalled(0.0, positions, ["a"]) is None
    assert watch.stalled(29.9, positions, ["a"]) is None
    assert watch.stalled(30.0, positions, ["a"]) == ("a", 30.0)


@given(
    steps=st.lists(
        st.tuples(st.floats(0.0, 25.0), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=60
    )
)
def test_a_reader_that_moves_in_some_partition_within_the_patience_never_stalls(
    steps: list[tuple[float, str]],
) -> None:
    """Restoring many partitions in turns: each step, after less than the patience, the
    reader moves in one partition; all three stay behind throughout."""
    watch: StallWatch[str] = StallWatch(STALL_AFTER, 600.0)
    positions = {"a": 0, "b": 0, "c": 0}
    now = 0.0
    assert watch.stalled(now, positions, positions) is None
    for pause, moving in steps:
        now += pause
        positions[moving] += 1
        assert watch.stalled(now, positions, positions) is None


@given(st.lists(st.floats(0.0, 1_000.0), min_size=1, max_size=30))
def test_a_partition_that_is_not_behind_never_stalls(pauses: list[float]) -> None:
    watch: StallWatch[str] = StallWatch(STALL_AFTER, 600.0)
    now = 0.0
    for pause in pauses:
        now += pause
        assert watch.stalled(now, {"a": 7}, []) is None


def test_a_wait_counts_from_when_the_partition_was_last_seen_behind() -> None:
    """A partition at its end for a long time, then behind (new records), waits from then:
    a reader idle at the tail is not stuck."""
    watch: StallWatch[str] = StallWatch(STALL_AFTER, 600.0)
    assert watch.stalled(0.0, {"a": 7}, []) is None
    assert watch.stalled(1_000.0, {"a": 7}, ["a"]) is None
    assert watch.stalled(1_029.0, {"a": 7}, ["a"]) is None
    assert watch.stalled(1_030.0, {"a": 7}, ["a"]) == ("a", 30.0)


def test_a_partition_that_stalls_again_is_given_twice_as_long_until_it_moves() -> None:
    watch: StallWatch[str] = StallWatch(STALL_AFTER, 100.0)
    now = 0.0
    for patience in (30.0, 60.0, 100.0, 100.0):  # doubled after each replacement, bounded
        assert watch.stalled(now, {"a": 3}, ["a"]) is None  # a new reader's first look
        assert watch.stalled(now + patience - 1, {"a": 3}, ["a"]) is None
        assert watch.stalled(now + patience, {"a": 3}, ["a"]) == ("a", patience)
        now += patience
        watch.replaced("a")
    watch.stalled(now, {"a": 3}, ["a"])
    watch.stalled(now + 1, {"a": 4}, ["a"])  # it moved: the patience is the first again
    assert watch.stalled(now + 1 + STALL_AFTER, {"a": 4}, ["a"]) == ("a", STALL_AFTER)


def test_a_patience_that_is_not_positive_or_above_its_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="need 0 < stall_after <= longest"):
        StallWatch(0.0, 10.0)
    with pytest.raises(ValueError, match="need 0 < stall_after <= longest"):
        StallWatch(20.0, 10.0)
