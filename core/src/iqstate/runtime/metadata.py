"""Discovery types (KIP-67, KIP-535): which instance hosts which store partition, and lag."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from iqstate.position import TopicPartition


@dataclass(frozen=True, order=True)
class HostInfo:
    """An instance's query endpoint, as given by `application_server`."""

    host: str
    port: int

    @classmethod
    def unavailable(cls) -> HostInfo:
        return cls("unavailable", -1)

    @classmethod
    def parse(cls, endpoint: str) -> HostInfo:
        """`"host:port"` (or `"https://host:port"`, `"http://host:port"`: whether an instance
        speaks TLS is its server's setting, so the scheme is accepted and dropped) ->
        `HostInfo`; raises `ValueError` naming what is malformed."""
        if not isinstance(endpoint, str):
            raise TypeError(
                f"application_server must be a 'host:port' string, got {type(endpoint).__name__}"
                f" {endpoint!r}"
            )
        address = endpoint.removeprefix("https://").removeprefix("http://").rstrip("/")
        host, separator, port = address.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"application_server must look like 'host:port' with a port in 1..65535, "
                f"got {endpoint!r}"
            )
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class StreamsMetadata:
    """What one instance hosts: store names and (changelog) topic partitions, active and standby."""

    host_info: HostInfo
    state_store_names: frozenset[str]
    topic_partitions: frozenset[TopicPartition]
    standby_state_store_names: frozenset[str] = frozenset()
    standby_topic_partitions: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where one key lives: the active host, the standby hosts, and the partition."""

    active_host: HostInfo
    standby_hosts: frozenset[HostInfo] = field(default_factory=frozenset)
    partition: int = -1

    NOT_AVAILABLE: ClassVar[KeyQueryMetadata]


KeyQueryMetadata.NOT_AVAILABLE = KeyQueryMetadata(HostInfo.unavailable(), frozenset(), -1)


@dataclass(frozen=True)
class LagInfo:
    """How far a local store partition is behind the end of its changelog."""

    current_offset_position: int
    """The changelog offset applied up to: the one committed, or past records a follower
    read and does not apply (expiry tombstones, records that do not decode)."""
    end_offset_position: int | None
    """`None` while unknown: the end offset has not been fetched from the broker yet, or this
    instance has lost contact with its cluster (a lag computed then would be a guess)."""
    rebuilt: bool = False
    """The partition was wiped after an unclean shutdown (exactly-once) and restarted empty."""

    @property
    def offset_lag(self) -> int | None:
        """Changelog records behind the end; `None` while the end is unknown."""
        if self.end_offset_position is None:
            return None
        return max(0, self.end_offset_position - self.current_offset_position)


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica of a store partition on an instance: its state and how far it lags.

    `state` is `RUNNING` or `RESTORING` (an active) or `STANDBY`. `lag` counts changelog
    records behind the end of the changelog, as the hosting instance last reported it;
    `None` when it has not reported one (it is starting, or the cluster does not report lags).
    """

    state: str
    lag: int | None


@dataclass(frozen=True)
class Departure:
    """How an instance left the cluster: `reason` is `"left"` (it closed cleanly) or
    `"silent"` (not heard from for the liveness timeout: it died or cannot reach Kafka);
    `seconds_ago`, how long ago it was last heard from."""

    reason: str
    seconds_ago: float


@dataclass(frozen=True)
class InstanceStatus:
    """One instance as this one sees the cluster: live with its replicas, or recently gone.

    `replicas[store][partition]` holds the replicas of a live instance (empty for one that
    is gone; its partitions have moved). `departure` is `None` for a live instance.
    """

    host_info: HostInfo
    replicas: dict[str, dict[int, ReplicaStatus]]
    departure: Departure | None = None

    @property
    def live(self) -> bool:
        return self.departure is None
