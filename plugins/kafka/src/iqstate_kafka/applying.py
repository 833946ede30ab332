"""Consecutive changelog units of one partition, folded into one store commit, and the
records a follower refuses.

A replica that is catching up reads many units of a partition at once. Committing each
alone costs a store commit per batch; committing them together costs one, and a reader
still sees the partition before or after whole batches (never inside one), because every
unit in the fold is complete, except an incomplete unit, which the reader hands out only
for a compacted stretch or past `max_held_records` (`ChangelogConsumer`). The fold leaves
the partition exactly as applying the units one by one would:

- each unit is judged against the fence as it stands after the units before it, so a
  replayed batch inside the fold is skipped like a replay across commits;
- the positions of the markers that are applied are merged (a later batch may cover other
  source partitions than an earlier one, so the last position alone could lose components);
- the fence is the last applied marker's batch id (ids that pass the fence only increase),
  and the offset to read next is the last unit's.

**What a marker applies** (SPEC 6's gap rule, for followers). Whoever can write a changelog
topic can write records in iqstate's format, so a follower checks what it applies:

- a marker whose batch id skips ahead of the partition's fence (more than fence + 1) is
  refused: a forged or stray marker would otherwise fence every later legitimate batch.
  Two gaps are legitimate and accepted: the marker of a batch written with `allow_gaps`
  (its header says so), and a gap that compaction explains: compaction keeps only a
  partition's latest marker, so where it removed records (offsets are missing since the
  previous marker, `ChangelogUnit.compacted`) the markers in between are gone;
- a data record belongs to the batch its header names: a marker applies its own batch's
  records. Records of other batches before it (a batch that never got a marker: abandoned,
  or written by someone else) are refused, unless compaction removed their markers, in
  which case those of batches between the fence and the marker are applied with it;
- records and markers of the fence's own batch are replays (a crash's replay repeats the
  last batch only), skipped as before. A marker of a batch *older* than the fence is not a
  replay: another writer, or a streaming query restarted with a new checkpoint (its batch
  ids start again at 0), writes this changelog. Its batch is skipped all the same (applying
  it would roll the partition back), but each of its records and its marker is reported
  (`BEHIND`), so that the writer's lost batches are seen, not silently dropped.

A refused marker leaves the fence and position where they were; refused records are never
applied; the offset moves past both, and each refusal is reported (`StoreCommit.refused`)
for the follower to log and count. An incomplete unit (data handed out without its marker:
part of a compacted stretch, or of a batch that outgrew `max_held_records`, see
`ChangelogConsumer`) adds the records of batches after the fence and its offset, and no
position or fence, wherever it is in the fold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iqstate.position import Position
from iqstate_kafka.format import BatchMarker, DataRecord
from iqstate_kafka.reader import ChangelogUnit

GAP = "gap"
"""A refused marker that skips ahead of the fence, and the records of its batch."""
STRAY = "stray"
"""A refused data record of a batch that got no marker of its own."""
BEHIND = "behind"
"""A skipped marker of a batch older than the partition's last one, and its batch's records."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A changelog record the fold did not apply: `reason` (`GAP`, `STRAY` or `BEHIND`),
    where, why."""

    reason: str
    offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class StoreCommit:
    """What one `HostedPartition.apply_changelog` call applies and commits; `refused`: the
    records and markers it does not apply that are not replays of the fence's batch."""

    entries: list[tuple[bytes, bytes | None]]
    batch_id: int | None
    """The fence to commit: the last applied marker's batch id (`None`: unchanged)."""
    position: Position | None
    """The merged position of the applied markers (`None`: unchanged)."""
    next_offset: int
    refused: tuple[Refusal, ...] = ()
    batches: tuple[AppliedBatch, ...] = ()
    """Each applied batch, in order: change subscriptions announce each on its own, though
    they are committed together."""

    def keeping(self, keep: Callable[[bytes, bytes | None], bool]) -> StoreCommit:
        """This commit with only the entries `keep` accepts (each batch's end moved)."""
        kept: list[tuple[bytes, bytes | None]] = []
        batches: list[AppliedBatch] = []
        start = 0
        for batch in (*self.batches, None):
            end = len(self.entries) if batch is None else batch.end
            kept += [entry for entry in self.entries[start:end] if keep(*entry)]
            if batch is not None:
                batches.append(AppliedBatch(len(kept), batch.position, batch.next_offset))
            start = end
        return StoreCommit(
            kept, self.batch_id, self.position, self.next_offset, self.refused, tuple(batches)
        )


@dataclass(frozen=True, slots=True)
class AppliedBatch:
    """One batch of a fold: its entries end at `end` of the commit's (after the previous
    batch's end), its marker's position, the changelog offset after its marker."""

    end: int
    position: Position
    next_offset: int


def fold(units: Sequence[ChangelogUnit], fence: int | None) -> StoreCommit:
    """The single commit equivalent to applying `units` (one partition's, in order) one by
    one to a replica whose fence is `fence`."""
    if not units:
        raise ValueError("fold needs at least one unit")
    entries: list[tuple[bytes, bytes | None]] = []
    refused: list[Refusal] = []
    batches: list[AppliedBatch] = []
    batch_id: int | None = None
    position: Position | None = None
    for unit in units:
        marker = unit.marker
        if marker is None:
            entries += unit.entries(fence)
            continue
        if unit.fenced(fence):  # a replayed batch: what its marker did not apply is stray
            if _older(marker, fence):
                refused += _behind(marker, fence, unit.records)
            refused += [_stray(record, marker) for record in unit.unfenced(fence)]
            continue
        # What writers write, and all of a restore: the marker's batch and nothing else
        # (after the fence, as the marker is), applied as it is.
        whole = unit.all_of_batch(marker.batch_id)
        if _skips_ahead(marker, fence) and not unit.compacted:
            refused += _gap(marker, fence, unit.unfenced(fence))
            continue
        if whole:
            entries += unit.pairs
        else:
            for record in unit.unfenced(fence):  # the others are replays of applied batches
                if _belongs(record, marker, unit.compacted):
                    entries.append((record.key, record.value))
                else:
                    refused.append(_stray(record, marker))
        position = marker.position if position is None else position.merge(marker.position)
        if marker.batch_id is not None:
            fence = batch_id = marker.batch_id
        batches.append(AppliedBatch(len(entries), marker.position, unit.next_offset))
    return StoreCommit(
        entries, batch_id, position, units[-1].next_offset, tuple(refused), tuple(batches)
    )


def _gap(marker: BatchMarker, fence: int | None, records: list[DataRecord]) -> list[Refusal]:
    """The refusals of a marker that skips ahead of `fence`, and of its batch's `records`."""
    return [
        Refusal(
            GAP,
            marker.offset,
            f"batch marker {marker.batch_id} skips ahead of the partition's last batch "
            f"{fence} (nothing compacted in between, and its writer did not allow gaps)",
        ),
        *(
            Refusal(GAP, record.offset, f"a record of refused batch {marker.batch_id}")
            for record in records
        ),
    ]


def _older(marker: BatchMarker, fence: int | None) -> bool:
    return marker.batch_id is not None and fence is not None and marker.batch_id < fence


def _behind(marker: BatchMarker, fence: int | None, records: list[DataRecord]) -> list[Refusal]:
    """The reports of a marker older than `fence`, and of its batch's records among `records`."""
    return [
        Refusal(
            BEHIND,
            marker.offset,
            f"batch marker {marker.batch_id} is older than the partition's last batch {fence}: "
            "a replay after a crash repeats the last batch only, so another writer, or a "
            "streaming query restarted with a new checkpoint (batch ids start again at 0), "
            "writes this changelog, and its batches are skipped until their ids pass "
            f"{fence}. Give each streaming query its own stores, and keep a query's "
            "checkpoint while its stores live",
        ),
        *(
            Refusal(
                BEHIND, record.offset, f"a record of batch {marker.batch_id}, older than {fence}"
            )
            for record in records
            if record.batch_id == marker.batch_id
        ),
    ]


def _skips_ahead(marker: BatchMarker, fence: int | None) -> bool:
    return (
        marker.batch_id is not None
        and fence is not None
        and marker.batch_id > fence + 1
        and not marker.allows_gap
    )


def _belongs(record: DataRecord, marker: BatchMarker, compacted: bool) -> bool:
    """Whether `marker` applies `record` (of a batch after the fence): its own batch's, or
    (where compaction removed the markers in between) an earlier batch's."""
    if record.batch_id == marker.batch_id:
        return True
    return (
        compacted
        and record.batch_id is not None
        and marker.batch_id is not None
        and record.batch_id < marker.batch_id
    )


def _stray(record: DataRecord, marker: BatchMarker) -> Refusal:
    return Refusal(
        STRAY,
        record.offset,
        f"a record of batch {record.batch_id}, which got no marker of its own before "
        f"batch marker {marker.batch_id}",
    )
