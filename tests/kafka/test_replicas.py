"""Replicas following their changelogs on a real broker, with RocksDB stores: two instances of
one application, each partition active on one and standby on the other. A batch written
through `begin_batch` reaches both replicas with its position; replays, deletes and window
stores behave as on one machine; records that do not decode are skipped and counted."""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from iqstate_kafka import BatchWriter, KafkaCluster, ensure_changelog_topics
from iqstate_kafka.format import MARKER_KEY, batch_headers
from replica_support import (
    KEY_VALUE,
    STORES,
    WINDOWS,
    Instance,
    StaticKafkaCluster,
    declare_stores,
    eventually,
    key_in,
    produce_raw,
    reached,
    start_instances,
    value_at,
    windows_at,
)

from iqstate import Application, Position, Serdes, TopicPartition
from iqstate.runtime import (
    ACTIVE,
    ACTIVE_CUT_OFF,
    ACTIVE_RESTORING,
    STANDBY,
    Assignment,
    HostInfo,
    PartitionRole,
)

HOST_A, HOST_B = HostInfo("a.test", 7001), HostInfo("b.test", 7002)


def layout() -> dict[HostInfo, Assignment]:
    """Partitions alternate between the two hosts as active; the other holds the standby."""
    roles: dict[HostInfo, dict[str, dict[int, PartitionRole]]] = {HOST_A: {}, HOST_B: {}}
    for store, count in STORES.items():
        for partition in range(count):
            active, standby = (HOST_A, HOST_B) if partition % 2 == 0 else (HOST_B, HOST_A)
            roles[active].setdefault(store, {})[partition] = ACTIVE
            roles[standby].setdefault(store, {})[partition] = STANDBY
    return {host: Assignment(stores) for host, stores in roles.items()}


@pytest.fixture
def pair(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> Iterator[tuple[Instance, Instance]]:
    """Instances `a` and `b` of one application, started."""
    a, b = start_instances(cluster, tmp_path, unique_name("app"), layout())
    try:
        yield a, b
    finally:
        a.app.close()
        b.app.close()


def test_a_batch_reaches_active_and_standby_replicas_with_its_position(
    pair: tuple[Instance, Instance],
) -> None:
    a, b = (instance.app for instance in pair)
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


def test_the_clusters_max_held_records_bounds_what_its_followers_hold(
    cluster: KafkaCluster,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`KafkaCluster(max_held_records=...)` reaches the readers of both replicas: a batch
    past it is applied in parts, with a warning naming it, and arrives whole in the end."""
    bounded = dataclasses.replace(cluster, max_held_records=2)
    caplog.set_level(logging.WARNING, logger="iqstate_kafka.reader")
    a, b = start_instances(bounded, tmp_path, unique_name("app"), layout())
    try:
        keys = [key_in(a.app, KEY_VALUE, 0, f"held{number}") for number in range(5)]
        position = Position.from_map({"events": {0: 7}})
        with a.app.begin_batch(position=position, batch_id=1) as batch:
            for value, key in enumerate(keys):
                batch.put(KEY_VALUE, key, value)
        for app in (a.app, b.app):
            for value, key in enumerate(keys):
                assert reached(lambda app=app, key=key: value_at(app, key, position), key) == value
    finally:
        a.app.close()
        b.app.close()
    warned = [r.getMessage() for r in caplog.records if r.name == "iqstate_kafka.reader"]
    assert len(warned) == 2  # once per replica of partition 0, active and standby
    assert all("batch 1" in message and "max_held_records" in message for message in warned)


def test_replayed_batches_change_nothing(pair: tuple[Instance, Instance]) -> None:
    """A pipeline replaying batches 1 and 2 (with other values, as a zombie writer would)
    after batch 2 leaves every replica as batches 1 and 2 left it."""
    a, b = (instance.app for instance in pair)
    key, gone = key_in(a, KEY_VALUE, 0, "replayed"), key_in(a, KEY_VALUE, 0, "gone")
    positions = [Position.from_map({"events": {0: offset}}) for offset in (0, 10, 20, 30)]
    writes: list[tuple[Application, int, dict[str, int | None]]] = [
        (a, 1, {key: 1, gone: 1}),
        (b, 2, {key: 2, gone: None}),
        (a, 1, {key: 100, gone: 100}),
        (b, 2, {key: 200, gone: 200}),
    ]
    for writer, batch_id, values in writes:
        with writer.begin_batch(position=positions[batch_id], batch_id=batch_id) as batch:
            for name, value in values.items():
                batch.put(KEY_VALUE, name, value)
    with a.begin_batch(position=positions[3], batch_id=3):
        pass  # markers only: once replicas have them, they have read the replays

    for app in (a, b):
        where = f"{app.host_info} after the replays"
        assert reached(lambda app=app: value_at(app, key, positions[3]), where) == 2
        assert reached(lambda app=app: value_at(app, gone, positions[3]), where) is None
        eventually(
            lambda app=app: all(p == positions[3] for *_, p in app.local_partitions()),
            f"{where}: every partition at batch 3, not back at a replayed batch's position",
        )


def test_actives_are_announced_caught_up_once_they_reach_the_end_seen_at_activation(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    """What the assignment provider relies on to move a RESTORING active to RUNNING."""
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, STORES)
    with BatchWriter(cluster, application_id) as writer:
        for batch_id in range(3):
            entries = {(KEY_VALUE, p): [(b"k%d" % n, b"v") for n in range(500)] for p in range(3)}
            writer.write(entries, batch_id=batch_id, position=None, stores={KEY_VALUE: 3})
    roles = {0: ACTIVE_RESTORING, 1: ACTIVE_RESTORING, 2: STANDBY}
    static = StaticKafkaCluster(cluster, {HOST_A: Assignment({KEY_VALUE: roles})})
    announced: list[tuple[tuple[str, int], int]] = []
    static.caught_up.append(lambda key: announced.append((key, static.follower.lags()[key])))
    app = declare_stores(
        Application(application_id, tmp_path, application_server=str(HOST_A), cluster=static)
    )
    with app:
        follower = static.follower
        eventually(lambda: len(announced) == 2, "both actives announced")
        assert sorted(announced) == [((KEY_VALUE, 0), 0), ((KEY_VALUE, 1), 0)]
        eventually(lambda: follower.lags().get((KEY_VALUE, 2)) == 0, "the standby at the end")
        assert not follower.caught_up(KEY_VALUE, 2), "a standby is not a caught-up active"
        assert follower.caught_up(KEY_VALUE, 0) and follower.caught_up(KEY_VALUE, 1)

        at_promotion = Position.from_map({"events": {0: 1}})
        with app.begin_batch(position=at_promotion, batch_id=3, stores=[KEY_VALUE]) as batch:
            batch.put(KEY_VALUE, key_in(app, KEY_VALUE, 2), 1)
        promoted = {**roles, 2: ACTIVE_RESTORING}
        static.assignment.rebalance({HOST_A: Assignment({KEY_VALUE: promoted})})
        eventually(lambda: len(announced) == 3, "the promoted standby announced")
        assert announced[2] == ((KEY_VALUE, 2), 0)
        eventually(
            lambda: all(p == at_promotion for *_, p in app.local_partitions()),
            "every partition at the batch written before the promotion",
        )
        assert len(announced) == 3, "announced once per activation"

        # Cut off (out of contact with the cluster): no longer followed as the active, so
        # given back it waits for the end offset seen then, announced as a new activation.
        static.assignment.rebalance(
            {HOST_A: Assignment({KEY_VALUE: {**promoted, 0: ACTIVE_CUT_OFF}})}
        )
        eventually(lambda: not follower.caught_up(KEY_VALUE, 0), "the cut-off active set back")
        static.assignment.rebalance({HOST_A: Assignment({KEY_VALUE: promoted})})
        eventually(lambda: len(announced) == 4, "the active back from the cut announced")
        assert announced[3] == ((KEY_VALUE, 0), 0)
        # What the assignment does as it cuts its actives off: not caught up at once,
        # whether or not the follower gets to see the cut-off role (a frozen process).
        follower.cut_off(KEY_VALUE, 0)
        assert not follower.caught_up(KEY_VALUE, 0)
        eventually(lambda: len(announced) == 5, "caught up again as the active it still is")


def test_an_active_catches_up_past_a_tail_it_cannot_apply(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    """A changelog that ends in an undecodable record and the data of a batch whose writer
    died before its marker: the active has applied everything complete, so it runs."""
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, STORES)
    changelog = TopicPartition(f"{application_id}-{KEY_VALUE}-changelog", 0)
    key = key_in(declare_stores(Application(application_id, tmp_path / "probe")), KEY_VALUE, 0)
    int64 = Serdes.int64()
    with BatchWriter(cluster, application_id) as writer:
        entries = {(KEY_VALUE, 0): [(key.encode(), int64.serialize(1))]}
        writer.write(entries, batch_id=1, position=None, stores={KEY_VALUE: 3})
    unfinished = [(key.encode(), int64.serialize(2), batch_headers(2))]  # its marker never came
    produce_raw(cluster, changelog, [(b"k", b"no header", None), *unfinished])
    static = StaticKafkaCluster(cluster, {HOST_A: Assignment({KEY_VALUE: {0: ACTIVE_RESTORING}})})
    announced: list[tuple[str, int]] = []
    static.caught_up.append(announced.append)
    app = declare_stores(
        Application(application_id, tmp_path / "a", application_server=str(HOST_A), cluster=static)
    )
    with app:
        eventually(lambda: announced == [(KEY_VALUE, 0)], "the active announced caught up")
        assert static.follower.skipped_records() == {(KEY_VALUE, 0): 1}
        assert value_at(app, key, Position.empty()) == (True, 1)  # batch 1, not half of batch 2
        assert static.follower.lags()[(KEY_VALUE, 0)] == 2  # what it could not apply yet


def test_records_that_do_not_decode_are_skipped_counted_and_logged(
    pair: tuple[Instance, Instance],
    cluster: KafkaCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = (instance.app for instance in pair)
    topics = {store: f"{a.application_id}-{store}-changelog" for store in STORES}
    undecodable = TopicPartition(topics[KEY_VALUE], 0)
    short_window_key = TopicPartition(topics[WINDOWS], 1)
    key, sensor = key_in(a, KEY_VALUE, 0), key_in(a, WINDOWS, 1)
    with caplog.at_level(logging.ERROR):
        produce_raw(
            cluster,
            undecodable,
            [(b"k", b"no header", None), (MARKER_KEY, b"\x07garbage", None)],
        )
        produce_raw(cluster, short_window_key, [(b"abc", b"\x00" * 8, batch_headers(1))])
        for batch_id in (1, 2):
            position = Position.from_map({"events": {0: batch_id}})
            with a.begin_batch(position=position, batch_id=batch_id) as batch:
                batch.put(KEY_VALUE, key, batch_id)
                batch.put(WINDOWS, sensor, batch_id, window_start=batch_id * 10)
            for app in (a, b):
                where = f"{app.host_info} at batch {batch_id}"
                value = reached(lambda app=app, at=position: value_at(app, key, at), where)
                windows = reached(lambda app=app, at=position: windows_at(app, sensor, at), where)
                assert value == batch_id
                assert windows == [(n * 10, n) for n in range(1, batch_id + 1)]

    for instance in pair:
        assert instance.follower.skipped_records() == {(KEY_VALUE, 0): 2, (WINDOWS, 1): 1}
    logged = {
        re.split(" does not decode| cannot be applied", record.getMessage())[0]
        for record in caplog.records
    }
    assert logged == {
        f"changelog record at {undecodable.topic} partition 0 offset 0",
        f"changelog record at {undecodable.topic} partition 0 offset 1",
        f"changelog record at {short_window_key.topic} partition 1 offset 0",
    }


def test_closing_does_not_wait_for_a_caught_up_listener(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    """A listener may wait for the application that is closing (an assignment provider
    re-installing roles): close returns anyway, and the follower ends once the listener does."""
    entered, release = threading.Event(), threading.Event()

    def blocking(key: tuple[str, int]) -> None:
        entered.set()
        release.wait(60)

    static = StaticKafkaCluster(cluster, {HOST_A: Assignment({KEY_VALUE: {0: ACTIVE}})})
    static.caught_up.append(blocking)
    app = declare_stores(
        Application(unique_name("app"), tmp_path, application_server=str(HOST_A), cluster=static)
    )
    app.start()
    eventually(entered.is_set, "the listener called")
    closer = threading.Thread(target=app.close)
    closer.start()
    closer.join(30)
    try:
        assert not closer.is_alive(), "close() waited for the blocked listener"
    finally:
        release.set()
    eventually(
        lambda: not any(thread.name == "iqstate-follower" for thread in threading.enumerate()),
        "the follower's thread ended after the listener returned",
    )


STARTS_AND_CLOSES = """
import sys, time
from pathlib import Path
from iqstate import Application
from iqstate_kafka import KafkaCluster
from iqstate_kafka.standalone import StandaloneReplicas

bootstrap, application_id, state = sys.argv[1], sys.argv[2], Path(sys.argv[3])
port = "%04X" % int(bootstrap.rsplit(":", 1)[1])

def connections():  # this process's TCP connections to the broker
    sockets = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:["):-1])
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for line in lines
               if line.split()[9] in sockets and line.split()[2].endswith(":" + port))

cluster = KafkaCluster(bootstrap)
kept = []
for run in range(3):
    app = Application(application_id, state / str(run), cluster=StandaloneReplicas(cluster))
    app.key_value_store("s", 2, key_serde="bytes", value_serde="bytes")
    with app:
        time.sleep(1)
    kept.append(app)  # a supervisor's or a fixture's reference
deadline = time.monotonic() + 20
while connections() and time.monotonic() < deadline:
    time.sleep(0.2)
print(connections())
"""


def test_a_closed_application_keeps_no_connection_to_the_cluster(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Applications kept after `close()` (by a supervisor, a fixture) hold none of their
    Kafka clients: each start and close used to leave the follower's admin client behind,
    with its threads and a connection to the broker. (In a process of its own: nothing
    else there connects.)"""
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {"s": 2})
    child = subprocess.run(
        [sys.executable, "-c", STARTS_AND_CLOSES, cluster.bootstrap_servers, application_id,
         str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["0"], "connections to the broker left after close"
