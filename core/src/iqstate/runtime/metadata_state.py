"""Discovery and lag: where every store partition lives, and how far local replicas lag.

Like Kafka Streams' `StreamsMetadataState`, answers come from the assignment the provider
knows for the whole cluster; lags come from the hosted partitions' committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from iqstate.position import TopicPartition
from iqstate.runtime.assignment import Assignment, AssignmentProvider
from iqstate.runtime.metadata import (
    HostInfo,
    InstanceStatus,
    KeyQueryMetadata,
    LagInfo,
    ReplicaStatus,
    StreamsMetadata,
)
from iqstate.runtime.partitioner import Partitioner, partition_function
from iqstate.runtime.partitions import HostedPartitions, changelog_partition
from iqstate.runtime.spec import StoreSpec
from iqstate.serdes import Serde, encoding_error


class MetadataState:
    """Answers `all_metadata`, `query_metadata_for_key`, local lags and the cluster's status."""

    def __init__(
        self,
        application_id: str,
        specs: Mapping[str, StoreSpec],
        assignment: AssignmentProvider,
        partitions: HostedPartitions,
    ) -> None:
        self._application_id = application_id
        self._specs = specs
        self._assignment = assignment
        self._partitions = partitions

    def _metadata_for(self, host: HostInfo, assignment: Assignment) -> StreamsMetadata:
        active_names: set[str] = set()
        standby_names: set[str] = set()
        active_tps: set[TopicPartition] = set()
        standby_tps: set[TopicPartition] = set()
        for name, partition, role in assignment.items():
            names, tps = (
                (active_names, active_tps) if role.is_active else (standby_names, standby_tps)
            )
            names.add(name)
            tps.add(changelog_partition(self._application_id, name, partition))
        return StreamsMetadata(
            host, frozenset(active_names), frozenset(active_tps),
            frozenset(standby_names), frozenset(standby_tps),
        )  # fmt: skip

    def all_metadata(self) -> list[StreamsMetadata]:
        cluster = self._assignment.cluster()
        return [self._metadata_for(host, cluster[host]) for host in sorted(cluster)]

    def for_key(
        self,
        spec: StoreSpec,
        key: Any,
        serializer: Serde[Any] | None,
        partitioner: Partitioner | None,
    ) -> KeyQueryMetadata:
        # As in Kafka Streams: a given partitioner, else the default partitioner on a given
        # serializer's bytes, else the store's own partitioning.
        if partitioner is not None:
            choose = partition_function(spec.name, spec.partitions, partitioner)
            partition = choose(key, b"")  # a partitioner reads the key, never its bytes
        else:
            serde = spec.key_serde if serializer is None else serializer
            try:
                key_bytes = serde.serialize(key)
            except Exception as exc:
                raise encoding_error(spec.name, serde, key, "key", exc) from exc
            if serializer is None:
                partition = spec.partition_of(key, key_bytes)
            else:
                partition = partition_function(spec.name, spec.partitions, None)(key, key_bytes)
        active = HostInfo.unavailable()
        standbys: set[HostInfo] = set()
        for host, assignment in self._assignment.cluster().items():
            role = assignment.role(spec.name, partition)
            if role is None:
                continue
            if role.is_active:
                active = host
            else:
                standbys.add(host)
        return KeyQueryMetadata(active, frozenset(standbys), partition)

    def local_lags(self) -> dict[str, dict[int, LagInfo]]:
        """Without a cluster a running active is its own changelog's end, and any other
        replica's end is what the assignment says (`StaticAssignment`'s `end_offsets`) or
        unknown: nothing fills it, so lag 0 would let it answer absent for every key. With
        a cluster, the end is the broker's, unknown (`None`) until fetched and while
        contact is lost."""
        lags: dict[str, dict[int, LagInfo]] = {}
        for name in self._partitions.store_names():
            found = self.store_lags(name)
            if found:
                lags[name] = found
        return lags

    def store_lags(self, name: str, partitions: Iterable[int] | None = None) -> dict[int, LagInfo]:
        """`local_lags` of store `name`, of those of `partitions` hosted here (default: all)."""
        contact = self._assignment.contact()
        lost = contact is not None and contact.lost
        hosted_here = self._partitions.of_store(name)
        asked = sorted(hosted_here) if partitions is None else sorted(set(partitions))
        lags: dict[int, LagInfo] = {}
        for partition in asked:
            hosted = hosted_here.get(partition)
            if hosted is None:
                continue
            current = hosted.applied_offset()
            end = None if lost else self._assignment.end_offset(name, partition)
            if hosted.role.is_running_active:
                if end is None and contact is None:
                    end = current  # no cluster: its own end
                elif end is not None:
                    end = max(current, end)
            lags[partition] = LagInfo(current, end, hosted.rebuilt)
        return lags

    def cluster_status(self, this_host: HostInfo) -> list[InstanceStatus]:
        """Every live instance with its replicas' states and lags (this one's from its own
        partitions, the others' as they last reported), then the instances recently gone."""
        contact = self._assignment.contact()
        # Cut off, the others' reports are as old as the silence: their lags are unknown.
        reported = {} if contact is not None and contact.lost else self._assignment.reported_lags()
        local = self._local_lag_numbers()
        statuses: list[InstanceStatus] = []
        cluster = self._assignment.cluster()
        for host in sorted(cluster):
            lags = local if host == this_host else reported.get(host, {})
            replicas: dict[str, dict[int, ReplicaStatus]] = {}
            for store, partition, role in cluster[host].items():
                replicas.setdefault(store, {})[partition] = ReplicaStatus(
                    role.state, lags.get((store, partition))
                )
            statuses.append(InstanceStatus(host, replicas))
        departures = self._assignment.departures()
        statuses.extend(
            InstanceStatus(host, {}, departures[host])
            for host in sorted(departures)
            if host not in cluster
        )
        return statuses

    def _local_lag_numbers(self) -> dict[tuple[str, int], int]:
        return {
            (store, partition): lag.offset_lag
            for store, partitions in self.local_lags().items()
            for partition, lag in partitions.items()
            if lag.offset_lag is not None
        }
