"""What a changelog follower may do to the partitions hosted here (distributed mode).

A follower (the Kafka plugin's `Follower`) keeps each hosted replica up to date from its
changelog. It needs to know which partitions are hosted, where each resumes, to apply units
and to start a replica over; the partition's lock, chain, files and commit stay the
runtime's (`HostedPartition`), so these protocols are all a follower gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from iqstate.position import Position, TopicPartition
from iqstate.runtime.assignment import PartitionRole
from iqstate.runtime.changelog_topic import TopicIds


class FollowedPartition(Protocol):
    """One hosted partition as its follower sees it."""

    @property
    def changelog_partition(self) -> TopicPartition | None:
        """The changelog partition it follows (None: it follows none)."""
        ...

    @property
    def role(self) -> PartitionRole:
        """Its role here (an active's lag decides when it runs)."""
        ...

    @property
    def closed(self) -> bool:
        """True once it is no longer hosted here (revoked, or the application closed)."""
        ...

    @property
    def fence(self) -> int | None:
        """The id of the last batch it committed (None before its first)."""
        ...

    @property
    def record_problem(self) -> Callable[[bytes, bytes | None], str | None] | None:
        """Why a changelog record of it does not decode (None: it does); None when every
        record decodes for its type of store."""
        ...

    @property
    def changelog_topic_ids(self) -> TopicIds:
        """The id of the changelog topic its data came from (`kept`, None when not known: a
        new or rebuilt replica, or one kept before ids were) and the ids it replaced."""
        ...

    def keep_changelog_topic_ids(self, ids: TopicIds) -> None:
        """Record the ids of its changelog topic from now on (`OSError` when they cannot be
        written; nothing once it is closed)."""
        ...

    def resume_offset(self) -> int | None:
        """The changelog offset to read next: the one committed with its last unit (None
        when it has none, or is closed: check `closed` after calling it)."""
        ...

    def settled_at(self, offset: int | None) -> None:
        """The follower read its changelog up to `offset`, applied every unit before it and
        holds nothing of it: the records after the last commit are none it applies (expiry
        tombstones, records that do not decode). Its lag counts from here; nothing is
        committed (a restart reads them again). None: it holds data waiting for a marker,
        or is not reading the partition now (the lag counts from the commit)."""
        ...

    def apply_changelog(
        self,
        entries: list[tuple[bytes, bytes | None]],
        batch_id: int | None,
        position: Position | None,
        next_offset: int,
        batches: Sequence[tuple[int, Position, int]] | None = None,
    ) -> list[bytes]:
        """Apply and commit units read from the changelog, `batches` saying where each
        applied batch ends (see `HostedPartition`); return the changelog keys of what the
        units expired, for an active replica to tombstone (see `HostedPartition`)."""
        ...

    def rebuild(self, ids: TopicIds) -> None:
        """Start over from an empty store that keeps the changelog topic ids `ids` (files
        moved aside, never deleted); `OSError` when it could not, and may be called again."""
        ...

    def settle(self) -> None:
        """It was just restored (caught up after many records): let its engine move its
        write buffers to their read-optimised form (`StateStore.settle`)."""
        ...


class FollowedPartitions(Protocol):
    """The partitions hosted here, as they are now (they change with the assignment)."""

    def store_names(self) -> list[str]: ...

    def of_store(self, name: str) -> Mapping[int, FollowedPartition]: ...
