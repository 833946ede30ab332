"""`KafkaAssignment` on a real broker: instances share the partitions with standbys elsewhere
and agree on the cluster, actives restore until the follower says they caught up, a clean
close moves partitions at once, a SIGKILLed instance's partitions move after the liveness
timeout, failover prefers caught-up replicas and a newcomer warms up first, listeners hear of
every change and may block on the application while it closes, an unreachable broker is a
clear error."""

from __future__ import annotations

import itertools
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping

import pytest
from iqstate_kafka import BrokerUnavailableError, KafkaCluster
from iqstate_kafka.assignment import KafkaAssignment, with_restoring
from iqstate_kafka.progress import CaughtUpListener
from test_membership import PATIENCE, wait_until

from iqstate.runtime.assignment import (
    ACTIVE,
    ACTIVE_CUT_OFF,
    ACTIVE_RESTORING,
    STANDBY,
    Assignment,
)
from iqstate.runtime.batch import StorePartition
from iqstate.runtime.metadata import HostInfo

INTERVAL = 0.1
LIVENESS = 1.0

CHILD = """
import sys, time
from iqstate_kafka import KafkaCluster
from iqstate_kafka.assignment import KafkaAssignment
from iqstate.runtime.metadata import HostInfo
servers, application, port, partitions, interval, liveness = sys.argv[1:]
provider = KafkaAssignment(
    KafkaCluster(servers), application, 1,
    heartbeat_interval=float(interval), liveness_timeout=float(liveness),
)
provider.start(HostInfo("127.0.0.1", int(port)), {"s": int(partitions)})
print("joined", flush=True)
time.sleep(3600)
"""


def host(port: int) -> HostInfo:
    return HostInfo("127.0.0.1", port)


class Progress:
    """The follower's side of `ReplicaProgress`, with lags and catch-ups the test decides."""

    def __init__(self, lags: Mapping[StorePartition, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._lags = dict(lags or {})
        self._caught_up: set[StorePartition] = set()
        self._listeners: list[CaughtUpListener] = []
        self._rebuilt_listeners: list[CaughtUpListener] = []

    def lags(self) -> Mapping[StorePartition, int]:
        with self._lock:
            return dict(self._lags)

    def set_lags(self, lags: Mapping[StorePartition, int]) -> None:
        with self._lock:
            self._lags = dict(lags)

    def end_offset(self, store: str, partition: int) -> int | None:
        return 1000 + partition

    def caught_up(self, store: str, partition: int) -> bool:
        with self._lock:
            return (store, partition) in self._caught_up

    def cut_off(self, store: str, partition: int) -> None:
        with self._lock:
            self._caught_up.discard((store, partition))

    def on_caught_up(self, listener: CaughtUpListener) -> None:
        self._listeners.append(listener)

    def on_rebuilt(self, listener: CaughtUpListener) -> None:
        self._rebuilt_listeners.append(listener)

    def rebuild(self, store: str, partition: int) -> None:
        with self._lock:
            self._caught_up.discard((store, partition))
        for listener in self._rebuilt_listeners:
            listener((store, partition))

    def catch_up(self, store: str, partition: int) -> None:
        with self._lock:
            self._caught_up.add((store, partition))
        for listener in self._listeners:
            listener((store, partition))


class Instances:
    """Starts providers of one application; closes them (and kills child instances) at the
    end."""

    def __init__(self, cluster: KafkaCluster, application_id: str) -> None:
        self.cluster = cluster
        self.application_id = application_id
        self.started: list[KafkaAssignment] = []
        self.children: list[subprocess.Popen[str]] = []

    def start(
        self,
        port: int,
        stores: Mapping[str, int],
        *,
        standbys: int = 1,
        liveness: float = LIVENESS,
        progress: Progress | None = None,
        shapes: Mapping[str, str] | None = None,
    ) -> KafkaAssignment:
        provider = KafkaAssignment(
            self.cluster,
            self.application_id,
            standbys,
            heartbeat_interval=INTERVAL,
            liveness_timeout=liveness,
            acceptable_recovery_lag=100,
            shapes=None if shapes is None else lambda: shapes,
        )
        self.started.append(provider)
        if progress is not None:  # before start, as KafkaCluster.connect attaches the follower
            provider.attach_progress(progress)
        provider.start(host(port), stores)
        return provider

    def child(self, port: int, partitions: int) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                self.cluster.bootstrap_servers,
                self.application_id,
                str(port),
                str(partitions),
                str(INTERVAL),
                str(LIVENESS),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == "joined\n", f"instance {port} did not join"
        return process

    def close(self) -> None:
        for process in self.children:
            process.kill()
            process.wait()
        for provider in self.started:
            provider.close()


@pytest.fixture
def instances(cluster: KafkaCluster, unique_name: Callable[[str], str]) -> Iterator[Instances]:
    started = Instances(cluster, unique_name("app"))
    try:
        yield started
    finally:
        started.close()


def with_role(assignment: Assignment, *wanted: object) -> set[StorePartition]:
    return {(store, number) for store, number, role in assignment.items() if role in wanted}


def actives(assignment: Assignment) -> set[StorePartition]:
    return with_role(assignment, ACTIVE, ACTIVE_RESTORING)


def converged(providers: list[KafkaAssignment], ports: list[int]) -> bool:
    views = [provider.cluster() for provider in providers]
    hosts = {host(port) for port in ports}
    return all(set(view) == hosts and view == views[0] for view in views) and all(
        view[host(port)] == provider.assignment()
        for view, provider, port in zip(views, providers, ports, strict=True)
    )


def test_instances_share_the_partitions_with_standbys_elsewhere(instances: Instances) -> None:
    ports = [7001, 7002, 7003]
    providers = [instances.start(port, {"s": 8, "t": 1}) for port in ports]
    wait_until(lambda: converged(providers, ports), PATIENCE, "the three agree on the cluster")
    cluster = providers[0].cluster()
    owners: dict[StorePartition, HostInfo] = {}
    for h, assignment in cluster.items():
        for partition in actives(assignment):
            assert partition not in owners, f"{partition} has two actives"
            owners[partition] = h
    assert sorted(owners) == [("s", n) for n in range(8)] + [("t", 0)]
    assert sorted(len(actives(a)) for a in cluster.values()) == [3, 3, 3]
    for partition, owner in owners.items():
        standbys = [h for h, a in cluster.items() if partition in with_role(a, STANDBY)]
        assert len(standbys) == 1
        assert standbys[0] != owner
    # nothing is running before a follower says so
    assert all(with_role(a, ACTIVE) == set() for a in cluster.values())


def test_an_active_restores_until_the_follower_says_it_caught_up(instances: Instances) -> None:
    progress = Progress()
    provider = instances.start(7001, {"s": 2})
    provider.attach_progress(progress)  # after start works as well as before
    announced: list[Assignment] = []
    provider.add_listener(announced.append)
    assert provider.assignment() == Assignment({"s": {0: ACTIVE_RESTORING, 1: ACTIVE_RESTORING}})
    assert provider.end_offset("s", 1) == 1001

    progress.catch_up("s", 0)
    wait_until(
        lambda: bool(announced) and announced[-1].role("s", 0) == ACTIVE,
        PATIENCE,
        "the caught-up active is announced running",
    )
    assert announced[-1] == Assignment({"s": {0: ACTIVE, 1: ACTIVE_RESTORING}})
    assert provider.assignment() == announced[-1]
    assert provider.cluster() == {host(7001): announced[-1]}
    assert all(a != b for a, b in itertools.pairwise(announced))

    # Rebuilt from an empty store (its changelog no longer held where it stood), the
    # running active restores again: it must not answer from a partly restored store.
    progress.rebuild("s", 0)
    wait_until(
        lambda: announced[-1].role("s", 0) == ACTIVE_RESTORING,
        PATIENCE,
        "the rebuilt active is announced restoring",
    )
    progress.catch_up("s", 0)
    wait_until(
        lambda: announced[-1].role("s", 0) == ACTIVE,
        PATIENCE,
        "the rebuilt active runs once caught up again",
    )


def test_an_active_back_from_being_cut_off_restores_before_it_runs() -> None:
    """An instance out of contact longer than the liveness timeout cuts its actives off; the
    others may have moved them and written on meanwhile. Given them back, it restores first
    (to the end offset seen then), even where the follower still says it had caught up
    before the cut (a reconnected instance whose id sorts first wins its partitions back)."""
    progress = Progress()
    progress.catch_up("s", 0)
    computed = Assignment({"s": {0: ACTIVE, 1: STANDBY}})
    back = with_restoring(computed, Assignment({"s": {0: ACTIVE_CUT_OFF}}), progress)
    assert back == Assignment({"s": {0: ACTIVE_RESTORING, 1: STANDBY}})
    kept = with_restoring(computed, Assignment({"s": {0: ACTIVE}}), progress)
    assert kept.role("s", 0) == ACTIVE, "a running active caught up keeps running"
    assert with_restoring(computed, back, progress).role("s", 0) == ACTIVE, "once caught up"


def test_a_promoted_standby_is_announced_restoring_before_it_runs(instances: Instances) -> None:
    """A partition that becomes active is announced restoring first, whatever the follower
    said of it before (it speaks of an active only once it follows the new role)."""
    everything = {("s", 0): 0, ("s", 1): 0}
    progress = Progress(everything)
    for partition in range(2):
        progress.catch_up("s", partition)
    leaving = instances.start(7001, {"s": 2}, liveness=60.0, progress=Progress(everything))
    staying = instances.start(7002, {"s": 2}, liveness=60.0, progress=progress)
    wait_until(
        lambda: (
            converged([leaving, staying], [7001, 7002]) and len(actives(leaving.assignment())) == 1
        ),
        PATIENCE,
        "both agree on one active each",
    )
    announced: list[Assignment] = []
    staying.add_listener(announced.append)
    (taken,) = actives(leaving.assignment())
    leaving.close()
    wait_until(
        lambda: any(taken in actives(a) for a in announced), PATIENCE, "the standby is promoted"
    )
    promoted = next(a for a in announced if taken in actives(a))
    assert promoted.role(*taken) == ACTIVE_RESTORING
    wait_until(lambda: staying.assignment().role(*taken) == ACTIVE, PATIENCE, "then it runs")


def test_other_instances_actives_show_as_running_once_their_heartbeats_say_so(
    instances: Instances,
) -> None:
    progress = Progress()
    first = instances.start(7001, {"s": 2}, standbys=0, progress=progress)
    second = instances.start(7002, {"s": 2}, standbys=0)
    wait_until(lambda: converged([first, second], [7001, 7002]), PATIENCE, "both agree")
    (mine,) = actives(first.assignment())
    progress.catch_up(*mine)
    wait_until(
        lambda: second.cluster()[host(7001)].role(*mine) == ACTIVE,
        PATIENCE,
        "the other instance sees the active running",
    )


def test_a_clean_close_moves_partitions_at_once(instances: Instances) -> None:
    staying = instances.start(7001, {"s": 4}, liveness=60.0)
    leaving = instances.start(7002, {"s": 4}, liveness=60.0)
    wait_until(lambda: converged([staying, leaving], [7001, 7002]), PATIENCE, "both agree")
    assert len(actives(staying.assignment())) == 2
    leaving.close()
    # a liveness timeout of 60 s: only the departure's tombstone explains a move this soon
    wait_until(
        lambda: actives(staying.assignment()) == {("s", n) for n in range(4)},
        PATIENCE,
        "the survivor takes every partition",
    )
    assert set(staying.cluster()) == {host(7001)}


def test_a_killed_instance_is_replaced_after_the_liveness_timeout(instances: Instances) -> None:
    survivors = [instances.start(port, {"s": 6}) for port in (7001, 7002)]
    killed = instances.child(7003, 6)
    wait_until(
        lambda: (
            all(len(p.cluster()) == 3 for p in survivors)
            and actives(survivors[0].cluster()[host(7003)]) != set()
        ),
        PATIENCE,
        "the child instance owns partitions",
    )
    killed.kill()
    killed.wait()
    wait_until(
        lambda: (
            actives(survivors[0].assignment()) | actives(survivors[1].assignment())
            == {("s", n) for n in range(6)}
        ),
        LIVENESS + 2 * INTERVAL + 2.0,  # the timeout, a heartbeat, slack for a busy machine
        "the survivors own every partition within the liveness timeout and a heartbeat",
    )
    wait_until(lambda: converged(survivors, [7001, 7002]), PATIENCE, "the survivors agree")


def test_failover_promotes_a_caught_up_replica_and_a_cold_instance_warms_up_first(
    instances: Instances,
) -> None:
    everything = {("s", 0): 0, ("s", 1): 0}
    leaving = instances.start(7001, {"s": 2}, standbys=0, liveness=60.0, progress=Progress())
    warm = instances.start(7002, {"s": 2}, standbys=0, liveness=60.0, progress=Progress(everything))
    cold_progress = Progress()
    cold = instances.start(7003, {"s": 2}, standbys=0, liveness=60.0, progress=cold_progress)
    providers = [leaving, warm, cold]
    wait_until(lambda: converged(providers, [7001, 7002, 7003]), PATIENCE, "all three agree")

    leaving.close()
    # balance alone would give each survivor one partition; the cold one must not serve yet
    wait_until(
        lambda: (
            actives(warm.assignment()) == set(everything) and converged([warm, cold], [7002, 7003])
        ),
        PATIENCE,
        "the caught-up instance takes both partitions",
    )
    assert actives(cold.assignment()) == set()
    (warming,) = with_role(cold.assignment(), STANDBY)  # a warm-up replica

    cold_progress.set_lags({warming: 5})  # within acceptable_recovery_lag (100)
    wait_until(
        lambda: (
            actives(cold.assignment()) == {warming}
            and actives(warm.assignment()) == set(everything) - {warming}
        ),
        PATIENCE,
        "the warmed-up instance takes over its share",
    )


def test_a_listener_may_block_on_the_application_that_is_closing(instances: Instances) -> None:
    """As `Application.close()` does: it holds its lock while closing the provider, and a
    rebalance arriving then waits for that lock in the listener. `close` must not wait for
    that listener."""
    application_lock = threading.Lock()
    entered = threading.Event()
    first = instances.start(7001, {"s": 4})

    def install(assignment: Assignment) -> None:
        entered.set()
        with application_lock:
            pass

    first.add_listener(install)
    with application_lock:
        instances.start(7002, {"s": 4})  # takes half of the first one's partitions
        wait_until(entered.is_set, PATIENCE, "the listener is told of the rebalance")
        closer = threading.Thread(target=first.close)
        closer.start()
        closer.join(PATIENCE)
        assert not closer.is_alive(), "close() waited for a listener blocked on the application"


def test_listeners_may_read_the_provider(instances: Instances) -> None:
    first = instances.start(7001, {"s": 4})
    seen: list[tuple[Assignment, Assignment, int]] = []
    first.add_listener(
        lambda assignment: seen.append((assignment, first.assignment(), len(first.cluster())))
    )
    instances.start(7002, {"s": 4})
    wait_until(lambda: any(count == 2 for *_, count in seen), PATIENCE, "the rebalance is heard")
    announced, current, _ = seen[-1]
    assert announced == current
    assert len(actives(announced)) == 2


def test_an_instance_declaring_a_store_with_other_serdes_is_warned_about(
    instances: Instances, caplog: pytest.LogCaptureFixture
) -> None:
    # The partition counts agree, so the assignment is shared; the answers would not be.
    ours = "key_value, key_serde string, value_serde json"
    theirs = "key_value, key_serde string, value_serde string"
    first = instances.start(7301, {"s": 4}, shapes={"s": ours})
    with caplog.at_level(logging.WARNING, logger="iqstate_kafka.assignment"):
        instances.start(7302, {"s": 4}, shapes={"s": theirs})
        wait_until(lambda: len(first.cluster()) == 2, PATIENCE, "both members seen")
        wait_until(
            lambda: sum("must declare each store alike" in r.message for r in caplog.records) >= 2,
            PATIENCE,
            "a warning on each side",
        )
    warned = [r.message for r in caplog.records if "must declare each store alike" in r.message]
    assert any(f"store 's' as {theirs}, this instance as {ours}" in m for m in warned), warned
    assert any(f"store 's' as {ours}, this instance as {theirs}" in m for m in warned), warned


def test_a_rolling_upgrade_that_adds_a_store_still_compares_the_shared_ones(
    instances: Instances, caplog: pytest.LogCaptureFixture
) -> None:
    ours = "key_value, key_serde string, value_serde json"
    theirs = "key_value, key_serde string, value_serde string"
    first = instances.start(7321, {"s": 4}, shapes={"s": ours})
    with caplog.at_level(logging.WARNING, logger="iqstate_kafka.assignment"):
        instances.start(7322, {"s": 4, "t": 2}, shapes={"s": theirs, "t": ours})
        wait_until(lambda: len(first.cluster()) == 2, PATIENCE, "both members seen")
        wait_until(
            lambda: sum("must declare each store alike" in r.message for r in caplog.records) >= 2,
            PATIENCE,
            "the shared store's serdes warned about on each side",
        )
    messages = " ".join(r.message for r in caplog.records)
    assert "shared among the instances that declare it" in messages


def test_an_instance_declaring_one_store_more_leaves_the_shared_ones_served(
    instances: Instances,
) -> None:
    # A rolling upgrade that adds store "t": the first two do not declare it yet. They used
    # to compute layouts over their own stores and disagree: a partition of "s" had no
    # running active anywhere for as long as the third ran.
    ports = [7311, 7312, 7313]
    providers = [
        instances.start(7311, {"s": 4}),
        instances.start(7312, {"s": 4}),
        instances.start(7313, {"s": 4, "t": 2}),
    ]
    wait_until(lambda: converged(providers, ports), PATIENCE, "the three agree on the cluster")
    cluster = providers[0].cluster()
    owners: dict[StorePartition, list[HostInfo]] = {}
    for h, assignment in cluster.items():
        for partition in actives(assignment):
            owners.setdefault(partition, []).append(h)
    assert sorted(owners) == [("s", n) for n in range(4)] + [("t", 0), ("t", 1)]
    assert all(len(hosts) == 1 for hosts in owners.values()), owners
    assert owners[("t", 0)] == owners[("t", 1)] == [host(7313)]
    for port in (7311, 7312):
        assert {store for store, _, _ in cluster[host(port)].items()} <= {"s"}


def test_an_unreachable_broker_is_a_clear_error() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    provider = KafkaAssignment(KafkaCluster(f"127.0.0.1:{port}", timeout=1.0), "app", 1)
    with pytest.raises(BrokerUnavailableError, match=f"Kafka at 127.0.0.1:{port} did not answer"):
        provider.start(host(7001), {"s": 2})
    assert provider.assignment() == Assignment.empty()
    assert provider.cluster() == {}
    provider.close()


@pytest.mark.parametrize(
    ("standbys", "lag", "message"),
    [(-1, 0, "num_standby_replicas must be >= 0"), (1, -5, "acceptable_recovery_lag must be")],
)
def test_bad_settings_are_refused(
    cluster: KafkaCluster, standbys: int, lag: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaAssignment(cluster, "app", standbys, acceptable_recovery_lag=lag)
