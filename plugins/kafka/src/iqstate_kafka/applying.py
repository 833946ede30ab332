"""Consecutive changelog units of one partition, folded into one store commit.

A replica that is catching up reads many units of a partition at once. Committing each
alone costs a store commit per batch; committing them together costs one, and a reader
still sees the partition before or after whole batches (never inside one), because every
unit in the fold is complete. The fold leaves the partition exactly as applying the units
one by one would:

- each unit's records are filtered by the fence as it stands after the units before it, so
  a replayed batch inside the fold is skipped like a replay across commits;
- the positions of the markers that are applied are merged (a later batch may cover other
  source partitions than an earlier one, so the last position alone could lose components);
- the fence is the last applied marker's batch id (ids that pass the fence only increase),
  and the offset to read next is the last unit's.

An incomplete unit (data handed out without its marker, see `ChangelogReader`) adds its
records and its offset, and no position or fence, wherever it is in the fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iqstate.position import Position
from iqstate_kafka.format import is_fenced
from iqstate_kafka.reader import ChangelogUnit


@dataclass(frozen=True, slots=True)
class StoreCommit:
    """What one `HostedPartition.apply_changelog` call applies and commits."""

    entries: list[tuple[bytes, bytes | None]]
    batch_id: int | None
    """The fence to commit: the last applied marker's batch id (`None`: unchanged)."""
    position: Position | None
    """The merged position of the applied markers (`None`: unchanged)."""
    next_offset: int


def fold(units: Sequence[ChangelogUnit], fence: int | None) -> StoreCommit:
    """The single commit equivalent to applying `units` (one partition's, in order) one by
    one to a replica whose fence is `fence`."""
    if not units:
        raise ValueError("fold needs at least one unit")
    entries: list[tuple[bytes, bytes | None]] = []
    batch_id: int | None = None
    position: Position | None = None
    for unit in units:
        entries += unit.entries(fence)
        marker = unit.marker
        if marker is None or is_fenced(marker.batch_id, fence):
            continue
        position = marker.position if position is None else position.merge(marker.position)
        if marker.batch_id is not None:
            fence = batch_id = marker.batch_id
    return StoreCommit(entries, batch_id, position, units[-1].next_offset)
