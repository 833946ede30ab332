"""Replicas following their changelogs on a real broker, with RocksDB stores: two instances of
one application, each partition active on one and standby on the other. A batch written
through `begin_batch` reaches both replicas with its position; replays, deletes and window
stores behave as on one machine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from iqstate_kafka import KafkaCluster
from replica_support import (
    KEY_VALUE,
    STORES,
    WINDOWS,
    StaticKafkaCluster,
    declare_stores,
    eventually,
    key_in,
    reached,
    value_at,
    windows_at,
)

from iqstate import Application, Position
from iqstate.runtime import ACTIVE, STANDBY, Assignment, HostInfo

HOST_A, HOST_B = HostInfo("a.test", 7001), HostInfo("b.test", 7002)


def layout() -> dict[HostInfo, Assignment]:
    """Partitions alternate between the two hosts as active; the other holds the standby."""
    roles: dict[HostInfo, dict[str, dict[int, object]]] = {HOST_A: {}, HOST_B: {}}
    for store, count in STORES.items():
        for partition in range(count):
            active, standby = (HOST_A, HOST_B) if partition % 2 == 0 else (HOST_B, HOST_A)
            roles[active].setdefault(store, {})[partition] = ACTIVE
            roles[standby].setdefault(store, {})[partition] = STANDBY
    return {host: Assignment(stores) for host, stores in roles.items()}  # type: ignore[arg-type]


@pytest.fixture
def pair(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> Iterator[tuple[Application, Application]]:
    """Instances `a` and `b` of one application, started."""
    application_id = unique_name("app")
    apps = [
        declare_stores(
            Application(
                application_id,
                tmp_path / host.host,
                application_server=str(host),
                num_standby_replicas=1,
                cluster=StaticKafkaCluster(cluster, layout()),
            )
        )
        for host in (HOST_A, HOST_B)
    ]
    for app in apps:
        app.start()
    try:
        yield apps[0], apps[1]
    finally:
        for app in apps:
            app.close()


def test_a_batch_reaches_active_and_standby_replicas_with_its_position(
    pair: tuple[Application, Application],
) -> None:
    a, b = pair
    kept, deleted = key_in(a, KEY_VALUE, 1, "kept"), key_in(a, KEY_VALUE, 1, "deleted")
    sensor = key_in(a, WINDOWS, 1, "sensor")
    first = Position.from_map({"events": {0: 10, 1: 4}})
    with a.begin_batch(position=first, batch_id=1) as batch:
        batch.put(KEY_VALUE, kept, 1)
        batch.put(KEY_VALUE, deleted, 2)
        batch.put(WINDOWS, sensor, 20, window_start=0)
        batch.put(WINDOWS, sensor, 21, window_start=10)
    second = Position.from_map({"events": {0: 12, 1: 4}})
    with b.begin_batch(position=second, batch_id=2) as batch:
        batch.put(KEY_VALUE, kept, 3)
        batch.delete(KEY_VALUE, deleted)
        batch.delete(WINDOWS, sensor, window_start=0)

    # Partition 1 of each store is active on b and standby on a: both reach the bound.
    assert a.roles()[KEY_VALUE][1] == STANDBY and b.roles()[KEY_VALUE][1] == ACTIVE
    for app in (a, b):
        where = f"{app.host_info} at batch 2"
        assert reached(lambda app=app: value_at(app, kept, second), where) == 3
        assert reached(lambda app=app: value_at(app, deleted, second), where) is None
        assert reached(lambda app=app: windows_at(app, sensor, second), where) == [(10, 21)]
    # Every partition of every covered store has a marker: all advance, data or not.
    for app in (a, b):
        eventually(
            lambda app=app: all(p == second for *_, p in app.local_partitions()),
            f"every partition on {app.host_info} at batch 2",
        )
        assert len(app.local_partitions()) == sum(STORES.values())
