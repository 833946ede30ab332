"""`Application(cluster=KafkaCluster(...))` end to end in one process, on a real broker: two
instances of one application with one standby each, through the real `KafkaConnection`
(Kafka assignment provider, batch writer, follower). Also the cluster's membership options."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from iqstate_kafka import ChangelogTopicError, KafkaCluster, LocalBroker
from replica_support import (
    KEY_VALUE,
    STORES,
    WINDOWS,
    eventually,
    key_in,
    reached,
    two_instances,
    value_at,
    windows_at,
)

from iqstate import Application, Position
from iqstate.runtime import ACTIVE, STANDBY, PartitionRole


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"heartbeat_interval": 0}, "heartbeat_interval must be a number of seconds > 0"),
        ({"liveness_timeout": float("nan")}, "liveness_timeout must be a number of seconds > 0"),
        (
            {"heartbeat_interval": 1.0, "liveness_timeout": 2.0},
            r"liveness_timeout \(2.0 s\) must be at least three heartbeat intervals \(1.0 s\)",
        ),
        ({"acceptable_recovery_lag": -1}, "acceptable_recovery_lag must be an int >= 0"),
        ({"acceptable_recovery_lag": 1.5}, "acceptable_recovery_lag must be an int >= 0"),
    ],
)
def test_bad_membership_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaCluster("localhost:9092", **options)  # type: ignore[arg-type]


def roles_everywhere(apps: list[Application]) -> dict[tuple[str, int], list[PartitionRole]]:
    """Each store partition's roles across `apps`, in the order of `apps`' hosts."""
    found: dict[tuple[str, int], list[PartitionRole]] = {}
    for app in apps:
        for store, roles in app.roles().items():
            for partition, role in roles.items():
                found.setdefault((store, partition), []).append(role)
    return found


def one_running_active_and_one_standby(apps: list[Application]) -> bool:
    everywhere = roles_everywhere(apps)
    return len(everywhere) == sum(STORES.values()) and all(
        sorted(roles, key=lambda role: role.state) == [ACTIVE, STANDBY]
        for roles in everywhere.values()
    )


@pytest.fixture
def instances(
    kafka_broker: LocalBroker, tmp_path: Path, unique_name: Callable[[str], str]
) -> Iterator[list[Application]]:
    cluster = KafkaCluster(
        kafka_broker.bootstrap_servers, timeout=10.0, heartbeat_interval=0.2, liveness_timeout=1.0
    )
    with two_instances(cluster, unique_name("app"), tmp_path) as (apps, _):
        yield apps


def test_two_instances_share_actives_and_standbys_and_a_clean_leave_promotes_standbys(
    instances: list[Application],
) -> None:
    a, b = instances
    eventually(
        lambda: one_running_active_and_one_standby(instances),
        "every partition RUNNING on one instance and standby on the other",
    )
    key, sensor = key_in(a, KEY_VALUE, 2), key_in(a, WINDOWS, 0)
    position = Position.from_map({"events": {0: 5}})
    with b.begin_batch(position=position, batch_id=1) as batch:
        batch.put(KEY_VALUE, key, 7)
        batch.put(WINDOWS, sensor, 8, window_start=30)
    for app in instances:  # the active and the standby of each partition
        assert reached(lambda app=app: value_at(app, key, position), str(app.host_info)) == 7
        windows = reached(lambda app=app: windows_at(app, sensor, position), str(app.host_info))
        assert windows == [(30, 8)]
    for app in instances:
        eventually(
            lambda app=app: all(
                lag.offset_lag == 0 and lag.end_offset_position > 0
                for lags in app.all_local_store_partition_lags().values()
                for lag in lags.values()
            ),
            f"{app.host_info}: every replica at the end of its changelog",
        )

    b.close()
    everything = {(store, p): [ACTIVE] for store, count in STORES.items() for p in range(count)}
    eventually(lambda: roles_everywhere([a]) == everything, "a RUNNING active for everything")
    assert value_at(a, key, position) == (True, 7)


def test_instances_declaring_a_store_otherwise_are_warned_about(
    kafka_broker: LocalBroker,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Through the Application: its stores are declared after the cluster is connected.
    cluster = KafkaCluster(
        kafka_broker.bootstrap_servers, timeout=10.0, heartbeat_interval=0.2, liveness_timeout=1.0
    )
    application_id = unique_name("shapes")
    apps = []
    for name, value_serde in (("a", "json"), ("b", "string")):
        app = Application(
            application_id, tmp_path / name, application_server=f"{name}.test:7000",
            num_standby_replicas=1, cluster=cluster,
        )  # fmt: skip
        app.key_value_store("orders", 2, value_serde=value_serde)
        apps.append(app)
    try:
        with caplog.at_level(logging.WARNING, logger="iqstate_kafka.assignment"):
            for app in apps:
                app.start()
            eventually(
                lambda: (
                    sum("must declare each store alike" in r.message for r in caplog.records) >= 2
                ),
                "a warning on each instance",
            )
    finally:
        for app in apps:
            app.close()
    warned = " ".join(r.message for r in caplog.records)
    assert "value_serde string" in warned and "value_serde json" in warned, warned


def test_a_start_the_changelog_topics_refuse_records_nothing_locally(
    kafka_broker: LocalBroker, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    # The error tells the user to declare the store as its topics are: that must then work.
    cluster = KafkaCluster(kafka_broker.bootstrap_servers, timeout=10.0)
    application_id = unique_name("declared")

    def instance(name: str, partitions: int) -> Application:
        app = Application(application_id, tmp_path / name, application_server=f"{name}.test:7000",
                          cluster=cluster)  # fmt: skip
        app.key_value_store("orders", partitions, engine="rocksdb")
        return app

    with instance("first", 4):
        pass
    with pytest.raises(ChangelogTopicError, match="declare the store with 4 partitions"):
        instance("second", 8).start()
    with instance("second", 4) as second:
        assert second.state.name == "RUNNING"
