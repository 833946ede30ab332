"""`KafkaCluster`: the settings of distributed mode's Kafka, and `connect`, which wires the
Kafka assignment provider, the batch writer and the follower together for an application.

The top of the package: everything else takes `ClusterSettings` (`iqstate_kafka.settings`),
which this class extends with `connect` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from iqstate_kafka.settings import ClusterSettings

if TYPE_CHECKING:
    from iqstate.runtime.cluster import ClusterMember
    from iqstate_kafka.connection import KafkaConnection


@dataclass(frozen=True)
class KafkaCluster(ClusterSettings):
    """The Kafka cluster of a distributed application (SPEC 9).

    `bootstrap_servers`: `"host:port[,host:port...]"` or a sequence of `"host:port"`.
    `replication_factor`: of the changelog topics iqstate creates. `client_config`: extra
    librdkafka settings for every client (e.g. `security.protocol`, `sasl.*`, `ssl.*`).
    `topic_config`: extra settings of created changelog topics (e.g. `min.insync.replicas`).
    `timeout`: seconds a request to the cluster may take before it counts as unreachable.
    `heartbeat_interval`: seconds between an instance's heartbeats on the members topic.
    `liveness_timeout`: seconds without a heartbeat after which an instance counts as dead
    and its partitions move (at least three heartbeat intervals).
    `acceptable_recovery_lag`: offsets a replica may lag behind its changelog and still count
    as caught up, so it can become active without restoring first (Kafka Streams' default).
    `reader_processes`: read the changelogs in that many worker processes (0: in the
    application's own), so a restore uses more than one core (about 1.3x the records a
    second on 2 cores, for more CPU in all).
    `max_held_records`: data records an instance holds in memory, across the partitions it
    reads, while their batches' markers have not come, so that each batch is applied in one
    commit (queries never see part of it). A batch that would hold more is applied in parts
    before its marker, with a warning. `None`: no bound.

    A frozen value; settings iqstate's guarantees depend on are refused in `client_config`
    and `topic_config` (`ValueError`), never silently overridden.

    `Application(..., cluster=KafkaCluster(...))` runs in distributed mode: it calls
    `connect` for its `KafkaConnection`.
    """

    def connect(self, member: ClusterMember) -> KafkaConnection:
        """`member`'s link to this cluster (core's `Cluster`): the Kafka assignment provider,
        a batch writer and a follower attached to the provider as the replicas' progress;
        for a member that does not serve, a writer only (`WriterAssignment`: it hosts
        nothing and joins nothing). No I/O yet: the provider's `start` checks the topics
        (and joins)."""
        # Imported when connecting: declaring a cluster loads no Kafka client.
        from iqstate_kafka.assignment import KafkaAssignment, WriterAssignment
        from iqstate_kafka.connection import KafkaConnection
        from iqstate_kafka.follower import Follower
        from iqstate_kafka.heartbeats import store_shape

        def shapes() -> dict[str, str]:  # at start: stores are declared after connecting
            return {name: store_shape(spec) for name, spec in member.stores.items()}

        if not member.serving:
            writer = WriterAssignment(self, member.application_id, shapes)
            return KafkaConnection(self, member, writer)

        assignment = KafkaAssignment(
            self,
            member.application_id,
            member.num_standby_replicas,
            heartbeat_interval=self.heartbeat_interval,
            liveness_timeout=self.liveness_timeout,
            acceptable_recovery_lag=self.acceptable_recovery_lag,
            shapes=shapes,
        )
        follower = Follower(self, reader_processes=self.reader_processes)
        assignment.attach_progress(follower)
        return KafkaConnection(self, member, assignment, follower)
