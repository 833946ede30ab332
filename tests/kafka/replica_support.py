"""Helpers of the replica tests: applications in distributed mode on a real broker, a fixed
layout of who hosts what, and waiting (bounded) for what replicas converge to."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer
from iqstate_kafka import Follower, KafkaCluster, KafkaConnection, ensure_changelog_topics
from iqstate_kafka.progress import CaughtUpListener

from iqstate import (
    Application,
    KeyQuery,
    Position,
    PositionBound,
    QueryResult,
    StateQueryRequest,
    StateQueryResult,
    TopicPartition,
    WindowKeyQuery,
)
from iqstate.runtime import Assignment, HostInfo, StaticAssignment
from iqstate.runtime.cluster import ClusterMember

T = TypeVar("T")

KEY_VALUE = "counts"
WINDOWS = "windows"
STORES = {KEY_VALUE: 3, WINDOWS: 2}


def eventually(check: Callable[[], T], what: str, within: float = 30.0) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `within` s."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so within {within:g} s (last: {found!r})")
        time.sleep(0.02)


class FollowedStaticAssignment(StaticAssignment):
    """core's `StaticAssignment` plus what the Kafka provider does around the follower:
    creating the changelog topics at start, answering end offsets from the follower."""

    def __init__(
        self,
        kafka: KafkaCluster,
        application_id: str,
        layout: Mapping[HostInfo, Assignment],
        follower: Follower,
    ) -> None:
        super().__init__(layout)
        self._kafka = kafka
        self._application_id = application_id
        self._follower = follower

    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        super().start(this_host, stores)
        ensure_changelog_topics(self._kafka, self._application_id, stores)

    def end_offset(self, store: str, partition: int) -> int | None:
        return self._follower.end_offset(store, partition)


@dataclass
class StaticKafkaCluster:
    """A cluster whose connections are the real `KafkaConnection` (writer and follower) with a
    fixed layout instead of membership; it keeps the connections it made. `caught_up`
    listeners are given to each follower before it starts."""

    kafka: KafkaCluster
    layout: Mapping[HostInfo, Assignment]
    caught_up: list[CaughtUpListener] = field(default_factory=list)
    connections: list[KafkaConnection] = field(default_factory=list)

    def connect(self, member: ClusterMember) -> KafkaConnection:
        follower = Follower(self.kafka)
        for listener in self.caught_up:
            follower.on_caught_up(listener)
        assignment = FollowedStaticAssignment(
            self.kafka, member.application_id, self.layout, follower
        )
        connection = KafkaConnection(self.kafka, member, assignment, follower)
        self.connections.append(connection)
        return connection

    @property
    def follower(self) -> Follower:
        """The follower of the latest connection (the running application's)."""
        return self.connections[-1].follower

    @property
    def assignment(self) -> FollowedStaticAssignment:
        """The assignment of the latest connection, to rebalance."""
        assignment = self.connections[-1].assignment
        assert isinstance(assignment, FollowedStaticAssignment)
        return assignment


@dataclass
class RecordingCluster:
    """A `KafkaCluster` (the production path: Kafka assignment, writer, follower) that keeps
    the connections it made, so tests can read their followers' counters."""

    kafka: KafkaCluster
    connections: list[KafkaConnection] = field(default_factory=list)

    def connect(self, member: ClusterMember) -> KafkaConnection:
        connection = self.kafka.connect(member)
        self.connections.append(connection)
        return connection

    @property
    def follower(self) -> Follower:
        """The follower of the latest connection (the running application's)."""
        return self.connections[-1].follower


def declare_stores(app: Application) -> Application:
    """A RocksDB key-value store (3 partitions) and window store (2), int64 values."""
    app.key_value_store(KEY_VALUE, STORES[KEY_VALUE], engine="rocksdb", value_serde="int64")
    app.window_store(
        WINDOWS,
        STORES[WINDOWS],
        window_size_ms=10,
        retention_ms=10_000_000,
        engine="rocksdb",
        value_serde="int64",
    )
    return app


def key_in(app: Application, store: str, partition: int, prefix: str = "key") -> str:
    """A string key of `store` that lands in `partition`."""
    spec = app.stores[store]
    for number in range(10_000):
        key = f"{prefix}-{number}"
        if spec.partition_of(key, spec.key_serde.serialize(key)) == partition:
            return key
    raise AssertionError(f"no key of {store!r} in partition {partition}")


def value_at(app: Application, key: str, bound: Position) -> tuple[bool, Any]:
    """`(reached, value)`: whether the key's partition here reached `bound`, and the value."""
    request = (
        StateQueryRequest.in_store(KEY_VALUE)
        .with_query(KeyQuery.with_key(key))
        .with_position_bound(PositionBound.at(bound))
    )
    result = only_result(app.query(request))
    if result.is_failure:
        return False, result.failure_message
    return True, result.result


def windows_at(app: Application, key: str, bound: Position) -> tuple[bool, Any]:
    """`(reached, [(window_start, value), ...])` of `key` in the window store, as `value_at`."""
    request = (
        StateQueryRequest.in_store(WINDOWS)
        .with_query(WindowKeyQuery.with_key_and_window_start_range(key, 0, 1_000_000))
        .with_position_bound(PositionBound.at(bound))
    )
    result = only_result(app.query(request))
    if result.is_failure:
        return False, result.failure_message
    return True, list(result.result)


def only_result(result: StateQueryResult[T]) -> QueryResult[T]:
    """The answer of the one partition a key query asked (the key's partition is hosted)."""
    answers = list(result.partition_results.values())
    assert len(answers) == 1, f"expected the key's partition to answer, got {answers!r}"
    return answers[0]


def reached(read: Callable[[], tuple[bool, T]], what: str, within: float = 30.0) -> T:
    """The value `read` gives once its partition reached the bound (polling, bounded)."""

    def check() -> tuple[T] | None:
        done, value = read()
        return (value,) if done else None

    return eventually(check, what, within)[0]


@dataclass(frozen=True)
class Instance:
    """A started application and the cluster it connected through (for its follower)."""

    app: Application
    cluster: StaticKafkaCluster

    @property
    def follower(self) -> Follower:
        return self.cluster.follower


def start_instances(
    kafka: KafkaCluster,
    state_dir: Path,
    application_id: str,
    layout: Mapping[HostInfo, Assignment],
) -> list[Instance]:
    """One started instance per host of `layout` (stores of `declare_stores`, one standby)."""
    instances = []
    try:
        for host in layout:
            static = StaticKafkaCluster(kafka, layout)
            app = Application(
                application_id,
                state_dir / host.host,
                application_server=str(host),
                num_standby_replicas=1,
                cluster=static,
            )
            instances.append(Instance(declare_stores(app), static))
            app.start()
    except BaseException:
        for instance in instances:
            instance.app.close()
        raise
    return instances


@contextmanager
def two_instances(
    kafka: KafkaCluster, application_id: str, state_dir: Path
) -> Iterator[tuple[list[Application], list[RecordingCluster]]]:
    """Instances `a.test:7000` and `b.test:7000` of one application (the stores of
    `declare_stores`, one standby) on `kafka`'s membership and assignment, started, with the
    clusters they connected through (for their followers); closed at the end."""
    recordings = [RecordingCluster(kafka) for _ in range(2)]
    apps = [
        declare_stores(
            Application(
                application_id,
                state_dir / name,
                application_server=f"{name}.test:7000",
                num_standby_replicas=1,
                cluster=recording,
            )
        )
        for name, recording in zip(("a", "b"), recordings, strict=True)
    ]
    try:
        for app in apps:
            app.start()
        yield apps, recordings
    finally:
        for app in apps:
            app.close()


Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def produce_raw(kafka: KafkaCluster, partition: TopicPartition, records: list[Raw]) -> None:
    """Write `(key, value, headers)` records as a foreign or broken writer would, durably."""
    failures: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "on_delivery": lambda error, _message: failures.append(error) if error else None,
        }
    )
    for key, value, headers in records:
        producer.produce(partition.topic, value, key, partition.partition, headers=headers)
    assert producer.flush(10) == 0
    assert failures == []
