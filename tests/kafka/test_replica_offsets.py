"""`ReplicaOffsets`: when a replica has read its changelog to the end known now (what the
follower waits for to settle a restored replica), its lag, and when an active caught up."""

from __future__ import annotations

from iqstate_kafka.reader import Watermarks
from iqstate_kafka.replicas import ReplicaOffsets


def test_the_end_is_not_reached_before_the_broker_has_told_it() -> None:
    offsets = ReplicaOffsets()
    offsets.committed_to(500)
    assert not offsets.at_end, "a commit alone says nothing of where the changelog ends"
    offsets.saw(Watermarks(0, 1_000))
    assert not offsets.at_end
    offsets.committed_to(1_000)
    assert offsets.at_end


def test_records_read_but_not_applicable_count_as_read() -> None:
    """A batch whose marker never came cannot be committed: the reader's position decides."""
    offsets = ReplicaOffsets()
    offsets.saw(Watermarks(0, 1_000))
    offsets.committed_to(900)
    offsets.read_to(950)
    assert not offsets.at_end
    offsets.read_to(1_000)
    assert offsets.at_end and offsets.lag == 100


def test_an_empty_changelog_is_at_its_end_once_known() -> None:
    offsets = ReplicaOffsets()
    assert not offsets.at_end
    offsets.saw(Watermarks(0, 0))
    assert offsets.at_end


def test_a_lag_counts_from_where_the_reader_settled_past_trailing_records() -> None:
    """Records no unit commits past (expiry tombstones after a batch's marker, records that
    do not decode) end the log of an idle pipeline: the replica is caught up once the
    reader holds nothing and has read past them, not when a commit reaches them."""
    offsets = ReplicaOffsets()
    offsets.saw(Watermarks(0, 1_000))
    offsets.committed_to(997)  # batch's marker at 996; three expiry tombstones after it
    offsets.read_to(1_000, settled=None)  # still holding data of a batch in progress
    assert offsets.lag == 3
    offsets.read_to(1_000, settled=1_000)
    assert offsets.lag == 0
    offsets.rebuilt()
    assert offsets.settled is None


def test_a_replica_is_caught_up_as_an_active_only_once_followed_as_one() -> None:
    """A standby at lag 0 just promoted: until the follower follows it as the active and it
    reaches the end offset seen then, it is not caught up (the assignment keeps it
    restoring), though its lag, against an end offset up to a second old, is 0."""
    offsets = ReplicaOffsets()
    offsets.saw(Watermarks(0, 1_000))
    offsets.committed_to(1_000)
    assert offsets.lag == 0 and not offsets.caught_up, "followed as a standby"
    offsets.set_active(True)
    assert not offsets.caught_up, "no target seen yet"
    offsets.saw(Watermarks(0, 1_200))  # the end at promotion
    assert not offsets.reaches_target() and not offsets.caught_up
    offsets.committed_to(1_200)
    assert offsets.reaches_target() and offsets.caught_up
    offsets.set_active(False)
    assert not offsets.caught_up
