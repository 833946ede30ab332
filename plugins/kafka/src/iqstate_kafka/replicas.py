"""Where one hosted replica stands in its changelog partition, as the follower tracks it.

Offsets follow the reader's meaning (`iqstate_kafka.reader`): `committed` is the next offset
to read, committed inside the store; `None` means nothing was applied, so the replica reads
from the earliest offset. The end offset comes from the broker (refreshed now and then) and
is raised by every commit beyond it, so a replica at the tail never shows a lag the broker
would not. Until the broker has answered once, the end offset is not known: a commit alone
(a replica reopened at its committed offset) says nothing of how far the changelog goes, so
the lag is unknown rather than zero (`end_known`).

An active replica is caught up when it has reached the end offset seen when it became
active (its *target*): the assignment keeps it `RESTORING` until then. Reached means *read*
up to there (`read`, the reader's position), with everything complete applied: records
that do not decode and the data of a batch whose marker has not come (a writer that died
mid-batch, or one still writing) cannot be applied, so waiting to commit past them would
keep the active restoring forever. A standby is caught up when it has reached the last end
offset seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from iqstate_kafka.reader import Watermarks


@dataclass(slots=True)
class ReplicaOffsets:
    """One replica's committed, earliest and end offsets, and its target while active."""

    committed: int | None = None
    earliest: int | None = None
    end: int | None = None
    active: bool = False
    target: int | None = None
    """The end offset seen when the replica became active (`None`: not active, or not
    seen yet)."""
    reached: bool = False
    """The active replica reached its target (announced once per activation or rebuild)."""
    read: int | None = None
    """The reader's next offset (past records read but not applicable), while assigned."""
    settled: int | None = None
    """The reader's next offset while it holds nothing of the partition, its units applied
    (`ChangelogConsumer.settled`): past trailing records no unit commits past."""

    @property
    def next_offset(self) -> int | None:
        """The next offset the replica reads, if known."""
        return self.committed if self.committed is not None else self.earliest

    @property
    def end_known(self) -> bool:
        """Whether the broker has given the partition's offsets (only `saw` sets `earliest`)."""
        return self.earliest is not None

    @property
    def lag(self) -> int | None:
        """Offsets between the replica and the end of its changelog partition, if known:
        from its committed offset, or from where the reader settled past records that no
        unit commits past (expiry tombstones, records that do not decode)."""
        position = self.next_offset
        if position is None or self.end is None or not self.end_known:
            return None
        if self.settled is not None and self.settled > position:
            position = self.settled
        return max(0, self.end - position)

    @property
    def at_end(self) -> bool:
        """Whether the replica has read (or committed) up to the end offset known now; records
        that cannot be applied (a batch whose marker has not come) count as read."""
        positions = [offset for offset in (self.next_offset, self.read) if offset is not None]
        if not positions or self.end is None or not self.end_known:
            return False
        return max(positions) >= self.end

    @property
    def caught_up(self) -> bool:
        """Whether the replica, followed as an active, reached its target. One the follower
        still follows as a standby is not, whatever its lag: a role reaches the follower at
        its next loop, and the assignment may ask about a promotion before that (a standby's
        lag counts against an end offset up to a second old, not the one at promotion)."""
        return self.active and self.reached

    def set_active(self, active: bool) -> None:
        """Follow a role change: becoming active starts a new wait for a target."""
        if active != self.active:
            self.active = active
            self.target = None
            self.reached = False

    def saw(self, watermarks: Watermarks) -> None:
        """The broker's offsets of the partition, asked just now."""
        self.earliest = watermarks.earliest
        self.end = watermarks.end
        if self.active and self.target is None:
            self.target = watermarks.end

    def committed_to(self, offset: int | None) -> None:
        """The replica committed `offset` (`None`: nothing yet)."""
        self.committed = offset
        if offset is not None and (self.end is None or offset > self.end):
            self.end = offset

    def rebuilt(self) -> None:
        """The replica was emptied to be rebuilt: an active waits for a new target."""
        self.committed = None
        self.read = None
        self.settled = None
        self.target = None
        self.reached = False

    def read_to(self, offset: int | None, settled: int | None = None) -> None:
        """The reader's position in the partition (`None`: it is not reading it now), and
        where it settled (`settled`: None while it holds data for a marker)."""
        self.read = offset
        self.settled = settled

    def reaches_target(self) -> bool:
        """True once per activation (or rebuild): when the active replica reaches its target."""
        positions = [offset for offset in (self.next_offset, self.read) if offset is not None]
        if self.reached or self.target is None or not positions or max(positions) < self.target:
            return False
        self.reached = True
        return True
