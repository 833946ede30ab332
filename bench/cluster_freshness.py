"""Distributed mode's freshness and failover on a real broker started by this script.

(a) freshness: two instances in this process, one standby per partition; instance A writes
    batches through `begin_batch`; the time from `begin_batch` returning to the batch's
    position bound being answered by the standby of every partition (p50, p99);
(b) failover: a third instance in its own process (`iqstate serve --cluster`) is SIGKILLed;
    the time until every partition is served by a RUNNING active again, with default
    settings (`liveness_timeout` 3 s);
(c) change subscriptions on replicas: a subscriber of instance B's standby partitions
    (`app.subscribe`, fed by B's follower as it applies the changelog) while A writes
    paced batches; the time from A's commit of a batch starting (its block ending) to each
    partition's event of the batch arriving at B's subscriber (p50, p99).

    python bench/cluster_freshness.py [--batches 200] [--failovers 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from iqstate_kafka import KafkaCluster, LocalBroker

from iqstate import Application, Position, PositionBound, RangeQuery, StateQueryRequest

PARTITIONS = 8


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def instance(root: Path, name: str, app_id: str, cluster: KafkaCluster) -> Application:
    app = Application(
        app_id,
        root / name,
        application_server=f"127.0.0.1:{free_port()}",
        num_standby_replicas=1,
        cluster=cluster,
    )
    app.key_value_store("counts", PARTITIONS, engine="rocksdb", value_serde="int64")
    app.start()
    return app


def standbys_of(apps: list[Application]) -> dict[int, Application]:
    found: dict[int, Application] = {}
    for app in apps:
        for _, partition, role, _ in app.local_partitions():
            if role.state == "STANDBY":
                found[partition] = app
    return found


def running_actives(apps: list[Application]) -> set[int]:
    return {
        partition
        for app in apps
        for _, partition, role, _ in app.local_partitions()
        if role.state == "RUNNING"
    }


def wait(what: str, check, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def reached(app: Application, partition: int, bound: Position) -> bool:
    request = (
        StateQueryRequest.in_store("counts")
        .with_query(RangeQuery.with_no_bounds())
        .with_partitions({partition})
        .with_position_bound(PositionBound.at(bound))
    )
    return app.query(request).partition_results[partition].is_success


def freshness(a: Application, b: Application, batches: int) -> list[float]:
    delays = []
    for batch_id in range(1, batches + 1):
        with a.begin_batch(position={"events": {0: batch_id}}, batch_id=batch_id) as batch:
            batch.put_all("counts", [(f"k{i}", batch_id) for i in range(32)])
        written = time.perf_counter()
        bound = Position.from_map({"events": {0: batch_id}})
        pending = standbys_of([a, b])
        while pending:
            pending = {p: app for p, app in pending.items() if not reached(app, p, bound)}
        delays.append(time.perf_counter() - written)
    return delays


def subscription_freshness(a: Application, b: Application, first: int, batches: int) -> list[float]:
    """(c): seconds from each batch's commit on `a` to its events at `b`'s subscriber."""
    mine = sorted(p for p, app in standbys_of([a, b]).items() if app is b)
    subscription = b.subscribe("counts", partitions=mine)
    expected = set(mine)  # each batch writes keys in every partition
    while subscription.poll() is not None:  # the snapshots
        pass
    written: dict[int, float] = {}
    arrived: list[tuple[int, float]] = []

    def follow() -> None:
        last = first + batches - 1
        seen_last: set[int] = set()
        for batch in subscription:
            newest = max(change.value for change in batch.changes)
            arrived.append((newest, time.perf_counter()))
            if newest == last:
                seen_last.add(batch.partition)
                if seen_last == expected:
                    return

    reader = threading.Thread(target=follow)
    reader.start()
    for batch_id in range(first, first + batches):
        with a.begin_batch(position={"events": {0: batch_id}}, batch_id=batch_id) as batch:
            batch.put_all("counts", [(f"k{i}", batch_id) for i in range(32)])
            # before the block's end commits it: a replica may apply the batch from the
            # changelog before the commit returns on A
            written[batch_id] = time.perf_counter()
        time.sleep(0.02)
    reader.join(timeout=60)
    subscription.close()
    return [at - written[batch_id] for batch_id, at in arrived if batch_id in written]


def failover(bootstrap: str, app_id: str, root: Path, apps: list[Application]) -> float:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
         "--app-id", app_id, "--application-server", f"127.0.0.1:{port}",
         "--state-dir", str(root / f"c-{port}"), "--standbys", "1",
         "--store", f"counts:key_value:{PARTITIONS},engine=rocksdb,value_serde=int64"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait("the third instance to take actives",
             lambda: len(running_actives(apps)) < PARTITIONS)  # fmt: skip
        wait("a settled cluster", lambda: _settled(apps), timeout=120)
        killed = time.perf_counter()
        os.kill(child.pid, signal.SIGKILL)
        wait("every partition served again", lambda: len(running_actives(apps)) == PARTITIONS)
        return time.perf_counter() - killed
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()


def _settled(apps: list[Application]) -> bool:
    # The third instance holds its share of actives, and it has stayed so for a moment.
    held = running_actives(apps)
    time.sleep(0.5)
    return held == running_actives(apps) and len(held) < PARTITIONS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, LocalBroker() as broker:
        root = Path(directory)
        cluster = KafkaCluster(broker.bootstrap_servers)
        app_id = f"bench-{os.getpid()}"
        a = instance(root, "a", app_id, cluster)
        b = instance(root, "b", app_id, cluster)
        try:
            wait("two instances with standbys", lambda: len(standbys_of([a, b])) == PARTITIONS)
            wait("every active running", lambda: len(running_actives([a, b])) == PARTITIONS)
            delays = sorted(freshness(a, b, args.batches))
            p50 = statistics.median(delays) * 1000
            p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000
            print(f"(a) freshness over {len(delays)} batches: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            events = sorted(subscription_freshness(a, b, args.batches + 1, args.batches))
            p50 = statistics.median(events) * 1000
            p99 = events[min(len(events) - 1, int(len(events) * 0.99))] * 1000
            print(
                f"(c) subscription freshness on a replica over {len(events)} events: "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
            )
            times = [failover(broker.bootstrap_servers, app_id, root, [a, b])
                     for _ in range(args.failovers)]  # fmt: skip
            print("(b) failover after SIGKILL: " + ", ".join(f"{t:.2f} s" for t in times)
                  + f" (median {statistics.median(times):.2f} s)")  # fmt: skip
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    main()
