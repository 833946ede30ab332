"""`KafkaConnection`: one application's link to a Kafka cluster (core's `ClusterConnection`).

It holds the three parts distributed mode needs from Kafka: the assignment provider
(membership and roles), a `BatchWriter` for the application's batches (they go to the
changelogs, never straight into local stores), and the `Follower` that applies the
changelogs to the partitions hosted here, this instance's own writes included.
`KafkaCluster.connect` builds it with the Kafka assignment provider, the follower attached
to it as the replicas' progress.
"""

from __future__ import annotations

from iqstate.runtime.assignment import AssignmentProvider
from iqstate.runtime.batch import Batch
from iqstate.runtime.cluster import ChangelogCounts, ClusterMember
from iqstate.runtime.following import FollowedPartitions
from iqstate_kafka.follower import Follower
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.writer import BatchWriter


class KafkaConnection:
    """Assignment, batch writing and changelog following for one application.

    `follower` is public for monitoring: records applied, records skipped, progress; a
    writer that does not serve has none (it hosts nothing to follow).
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        member: ClusterMember,
        assignment: AssignmentProvider,
        follower: Follower | None = None,
    ) -> None:
        self._member = member
        self._assignment = assignment
        self.follower = follower
        self._writer = BatchWriter(cluster, member.application_id)

    @property
    def assignment(self) -> AssignmentProvider:
        return self._assignment

    def follow(self, partitions: FollowedPartitions) -> None:
        """Start applying the changelogs to `partitions` (and whatever they come to hold)."""
        if self.follower is not None:
            self.follower.start(partitions)

    def write_batch(self, batch: Batch) -> None:
        """Write `batch` to the changelogs of the stores it covers (all declared stores
        unless it names some); returns once its markers are durable (`DeliveryError` if
        they are not: replay the batch with the same id)."""
        declared = self._member.stores
        covered = declared.keys() if batch.stores is None else batch.stores
        self._writer.write(
            batch.pending(),
            batch_id=batch.batch_id,
            position=batch.position,
            stores={name: declared[name].partitions for name in sorted(covered)},
            allow_gaps=batch.allow_gaps,
        )

    def changelog_counts(self) -> ChangelogCounts:
        """The follower's counts (nothing for a writer, which follows nothing)."""
        return ChangelogCounts() if self.follower is None else self.follower.counts()

    def close(self) -> None:
        """Stop following, release the producer, and leave the cluster."""
        try:
            if self.follower is not None:
                self.follower.stop()
            self._writer.close()
        finally:
            self._assignment.close()
