"""`StandaloneReplicas`: a cluster on which an application hosts every partition of its
stores as a replica following the changelogs, with no membership (core's
`StandaloneAssignment`): how a tool, a test or a benchmark restores or follows changelogs
without joining a group.

    replicas = StandaloneReplicas(KafkaCluster(bootstrap), reader_processes=2)
    app = Application("app", state_dir, cluster=replicas)
    ...
    replicas.follower.lags()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iqstate.runtime import StandaloneAssignment
from iqstate_kafka.cluster import KafkaCluster

if TYPE_CHECKING:
    from iqstate.runtime.cluster import ClusterMember
    from iqstate_kafka.connection import KafkaConnection
    from iqstate_kafka.follower import Follower


class StandaloneReplicas:
    """`cluster`'s changelogs followed by one application hosting every partition;
    `follower_options` go to its `Follower` (e.g. `max_records`, `reader_processes`)."""

    def __init__(self, cluster: KafkaCluster, **follower_options: Any) -> None:
        self.cluster = cluster
        self.follower_options = follower_options
        self._follower: Follower | None = None

    def connect(self, member: ClusterMember) -> KafkaConnection:
        from iqstate_kafka.connection import KafkaConnection
        from iqstate_kafka.follower import Follower

        self._follower = Follower(self.cluster, **self.follower_options)
        return KafkaConnection(self.cluster, member, StandaloneAssignment(), self._follower)

    @property
    def follower(self) -> Follower:
        """The application's follower (its lags, the records it applied)."""
        if self._follower is None:
            raise RuntimeError("no application has connected to these replicas yet (start it)")
        return self._follower
