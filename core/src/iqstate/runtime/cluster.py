"""Distributed mode's seam: what an application needs from a cluster (SPEC section 9).

Core knows no Kafka: `iqstate_kafka.KafkaCluster` implements `Cluster`. An application with a
cluster gets from it an assignment provider (membership: which instance hosts which store
partition, in which role), a writer for its batches (they go to the changelogs, never into
local stores), and a follower that applies the changelogs to the partitions hosted here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from iqstate.runtime.assignment import AssignmentProvider
from iqstate.runtime.metadata import HostInfo
from iqstate.runtime.spec import StoreSpec

if TYPE_CHECKING:
    from iqstate.runtime.batch import Batch, StorePartition
    from iqstate.runtime.following import FollowedPartitions


@dataclass(frozen=True)
class ChangelogCounts:
    """What the follower did with the changelog records it read, per store partition hosted
    here, since the application started: records `applied`, and records `skipped` by
    reason (`undecodable`, a refusal: `gap`, `stray`, or `behind`: of a batch older than the
    partition's last one; each skipped record was logged, a `behind` batch in one line)."""

    applied: Mapping[StorePartition, int] = field(default_factory=dict)
    skipped: Mapping[StorePartition, Mapping[str, int]] = field(default_factory=dict)


class ClusterMember(Protocol):
    """What an application tells its cluster about itself."""

    application_id: str
    host_info: HostInfo
    num_standby_replicas: int
    serving: bool
    """False for an application that only writes: it is not a member and hosts nothing."""

    @property
    def stores(self) -> Mapping[str, StoreSpec]: ...


class ClusterConnection(Protocol):
    """One application's link to the cluster, from `start()` to `close()`."""

    @property
    def assignment(self) -> AssignmentProvider:
        """Membership and roles; its `start` joins the cluster (checking topics first)."""
        ...

    def follow(self, partitions: FollowedPartitions) -> None:
        """Start applying the changelogs to the partitions hosted here, as they change."""
        ...

    def write_batch(self, batch: Batch) -> None:
        """Write a batch to the changelogs; return only when its markers are durable."""
        ...

    def changelog_counts(self) -> ChangelogCounts:
        """Changelog records applied and skipped here, per store partition."""
        ...

    def close(self) -> None:
        """Stop following and leave the cluster (its partitions move at once)."""
        ...


class Cluster(Protocol):
    """A cluster an application joins in distributed mode."""

    def connect(self, member: ClusterMember) -> ClusterConnection:
        """A connection for `member` (no I/O yet: the assignment's `start` joins, unless
        the member does not serve: then it only checks the topics its batches go to)."""
        ...
