"""Restore rate into RocksDB: a replica rebuilding a 1,000,000-record changelog through the real
follower, against a raw floor measured in the same run.

* data: `--records` distinct 16-byte keys in shuffled order with 100-byte values, written with
  `BatchWriter` in batches of `--batch` over `--partitions` changelog partitions (one marker
  per partition per batch), once; every round restores the same topic.
* follower: an `Application` with one RocksDB key-value store over the topic, a fresh state
  directory, hosting every partition as its active (core's `StandaloneAssignment`: membership
  plays no part in restoring) and following through `KafkaConnection` and `Follower`; timed
  from `start()` until every partition has committed the end of its changelog, i.e. opening
  the stores, reading, decoding, folding units, applying and committing data, offsets,
  position and fence per store commit.
* floor: raw confluent-kafka consuming the same partitions, with the follower's consumer
  settings (`iqstate_kafka.follower.CONSUMER_DEFAULTS`), with `consume(10_000, 1.0)` (asking
  no more than remain), skipping the markers, and writing each call's records into one
  rocksdict `WriteBatch` per partition, one database per partition, through the WAL without
  fsync (as the stores commit). No decoding, no positions, no offsets kept.

* `--reader-processes N [N ...]`: the follower reading in N worker processes
  (`Follower(reader_processes=N)`; 0, the default: in its own); several values measure a
  follower for each, in the same alternating rounds.
* baseline (`--baseline REV`): the follower of git revision `REV` of this repository
  (its `core` and `plugins` sources, extracted with `git archive`), restoring the same topic
  in the same rounds. Then both followers run in a child process each round, so neither
  inherits the other's state.

Rounds alternate floor and follower (and baseline); the best round of each counts. Besides
the rates, the CPU time the restoring process (and its reader workers, with
`--reader-processes N`) spent per record (Python, librdkafka's and RocksDB's threads; the
broker runs apart) shows what each costs when the broker is not the bottleneck. Starts a
broker (`LocalBroker`) unless given one.

    python bench/kafka_restore.py [--records 1000000] [--batch 50000] [--partitions 4]
        [--rounds 3] [--max-records N] [--reader-processes N [N ...]]
        [--bootstrap HOST:PORT] [--baseline REV]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from iqstate_kafka import (
    BatchWriter,
    Follower,
    KafkaCluster,
    KafkaConnection,
    LocalBroker,
    ensure_changelog_topics,
)
from iqstate_kafka.follower import CONSUMER_DEFAULTS
from iqstate_kafka.format import MARKER_KEY
from rocksdict import Options, Rdict, WriteBatch
from timing import calibration_line

from iqstate import Application, Position
from iqstate.runtime import StandaloneAssignment
from iqstate.runtime.cluster import ClusterMember
from iqstate.runtime.partitioner import partition_for_bytes

STORE = "restore"


def write_changelog(
    cluster: KafkaCluster, records: int, batch: int, partitions: int
) -> tuple[str, int]:
    """Write the shuffled records; return the application id and the offsets written."""
    application_id = f"bench-restore-{uuid.uuid4().hex[:8]}"
    ensure_changelog_topics(cluster, application_id, {STORE: partitions})
    keys = [b"key-%012d" % number for number in range(records)]
    random.Random(7).shuffle(keys)
    value = b"v" * 100
    batches = 0
    with BatchWriter(cluster, application_id) as writer:
        for start in range(0, records, batch):
            entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
            for key in keys[start : start + batch]:
                partition = partition_for_bytes(key, partitions)
                entries.setdefault((STORE, partition), []).append((key, value))
            writer.write(
                entries,
                batch_id=batches,
                position=Position.from_map({"source": {0: start + batch}}),
                stores={STORE: partitions},
            )
            batches += 1
    return application_id, records + batches * partitions


class _Standalone:
    """A cluster whose connections host every partition here (no membership). The bench
    keeps its own rather than `iqstate_kafka.standalone`'s: `--baseline` runs it against
    older revisions, which lack that module."""

    def __init__(self, cluster: KafkaCluster, follower_options: dict[str, Any]) -> None:
        self.cluster = cluster
        self.follower_options = follower_options
        self.connection: KafkaConnection | None = None

    def connect(self, member: ClusterMember) -> KafkaConnection:
        follower = Follower(self.cluster, **self.follower_options)
        self.connection = KafkaConnection(self.cluster, member, StandaloneAssignment(), follower)
        return self.connection


def restore_follower(
    cluster: KafkaCluster,
    application_id: str,
    partitions: int,
    records: int,
    follower_options: dict[str, Any],
) -> float:
    state = Path(tempfile.mkdtemp(prefix="bench-restore-"))
    standalone = _Standalone(cluster, follower_options)
    app = Application(application_id, state, cluster=standalone)
    app.key_value_store(STORE, partitions, engine="rocksdb", key_serde="bytes", value_serde="bytes")
    try:
        start = time.perf_counter()
        app.start()
        assert standalone.connection is not None
        follower = standalone.connection.follower
        while True:
            lags = follower.lags()
            if len(lags) == partitions and not any(lags.values()):
                break
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        applied = follower.applied_records
        if applied != records:
            raise AssertionError(f"the follower applied {applied:,} records, not {records:,}")
        return elapsed
    finally:
        app.close()
        shutil.rmtree(state)


def restore_floor(cluster: KafkaCluster, application_id: str, partitions: int, total: int) -> float:
    state = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    topic = f"{application_id}-{STORE}-changelog"
    consumer = Consumer(
        cluster.client_settings(
            CONSUMER_DEFAULTS, **{"group.id": "bench-floor", "enable.auto.commit": False}
        )
    )
    try:
        start = time.perf_counter()
        databases = [
            Rdict(str(state / str(p)), options=Options(raw_mode=True)) for p in range(partitions)
        ]
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        while seen < total:
            messages = consumer.consume(min(10_000, total - seen), 1.0)
            batches: dict[int, WriteBatch] = {}
            for message in messages:
                key = message.key()
                if key == MARKER_KEY:
                    continue
                number = message.partition() or 0
                batch = batches.get(number)
                if batch is None:
                    batch = batches[number] = WriteBatch(raw_mode=True)
                value = message.value()
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
            for number, batch in batches.items():
                databases[number].write(batch)
            seen += len(messages)
        elapsed = time.perf_counter() - start
        for database in databases:
            database.close()
        return elapsed
    finally:
        consumer.close()
        shutil.rmtree(state)


class Round(NamedTuple):
    seconds: float
    cpu_seconds: float


def measured(restore: Callable[[], float]) -> Round:
    """The restore's wall time, and the CPU time this process and the child processes it
    ended meanwhile (the follower's reader workers) spent."""

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    before = cpu()
    seconds = restore()
    return Round(seconds, cpu() - before)


def extract_revision(revision: str) -> tuple[Path, str]:
    """`revision`'s core and plugin sources in a new directory, and their `PYTHONPATH`."""
    root = Path(__file__).resolve().parent.parent
    directory = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "core", "plugins"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    sources = [directory / "core" / "src", *sorted((directory / "plugins").glob("*/src"))]
    return directory, os.pathsep.join(str(source) for source in sources)


def in_child(
    args: argparse.Namespace, application_id: str, pythonpath: str | None, processes: int
) -> Round:
    """One follower round in a new Python process (with `pythonpath` first, if given; a
    baseline's follower reads in its own process, `processes` is for this one's)."""
    environment = dict(os.environ)
    if pythonpath is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [pythonpath, *filter(None, [environment.get("PYTHONPATH")])]
        )
    command = [sys.executable, __file__, "--follower-round", application_id]
    command += ["--bootstrap", args.bootstrap, "--records", str(args.records)]
    command += ["--partitions", str(args.partitions)]
    if args.max_records is not None:
        command += ["--max-records", str(args.max_records)]
    if pythonpath is None:
        command += ["--reader-processes", str(processes)]
    output = subprocess.run(
        command, env=environment, check=True, capture_output=True, text=True
    ).stdout
    seconds, cpu_seconds = json.loads(output.strip().splitlines()[-1])
    return Round(seconds, cpu_seconds)


def follower_options(args: argparse.Namespace, processes: int) -> dict[str, Any]:
    options: dict[str, Any] = {"reader_processes": processes} if processes else {}
    if args.max_records is not None:
        options["max_records"] = args.max_records
    return options


def follower_round(cluster: KafkaCluster, args: argparse.Namespace) -> None:
    """`--follower-round`: restore once, print `[seconds, cpu seconds]` as JSON."""
    options = follower_options(args, args.reader_processes[0])
    result = measured(
        lambda: restore_follower(
            cluster, args.follower_round, args.partitions, args.records, options
        )
    )
    print(json.dumps([result.seconds, result.cpu_seconds]))


def run_follower(
    cluster: KafkaCluster, args: argparse.Namespace, application_id: str, processes: int
) -> Round:
    """A round of this revision's follower: in a child process when a baseline runs too
    (so neither inherits the other's state), else in this one."""
    if args.baseline:
        return in_child(args, application_id, None, processes)
    options = follower_options(args, processes)
    return measured(
        lambda: restore_follower(cluster, application_id, args.partitions, args.records, options)
    )


def report(cluster: KafkaCluster, args: argparse.Namespace) -> None:
    application_id, total = write_changelog(cluster, args.records, args.batch, args.partitions)
    baseline: tuple[Path, str] | None = None
    if args.baseline:
        baseline = extract_revision(args.baseline)
        args.bootstrap = cluster.bootstrap_servers
    runs: dict[str, Callable[[], Round]] = {}
    for processes in args.reader_processes:
        name = f"follower, {processes} reader processes" if processes else "follower"
        runs[name] = functools.partial(run_follower, cluster, args, application_id, processes)
    if baseline is not None:
        runs[f"baseline {args.baseline}"] = functools.partial(
            in_child, args, application_id, baseline[1], 0
        )
    floors: list[Round] = []
    sides: dict[str, list[Round]] = {name: [] for name in runs}
    try:
        for _ in range(args.rounds):
            floors.append(
                measured(lambda: restore_floor(cluster, application_id, args.partitions, total))
            )
            for name, run in runs.items():
                sides[name].append(run())
    finally:
        if baseline is not None:
            shutil.rmtree(baseline[0])
    floor = min(floors)
    print(calibration_line())
    print(
        f"restore of {args.records:,} records (16 B shuffled keys, 100 B values) in batches of "
        f"{args.batch:,} over {args.partitions} partitions (+{total - args.records:,} markers) "
        f"into RocksDB; best of {args.rounds} rounds"
    )
    rounds = {"floor (consume + WriteBatch)": floors, **sides}
    for name, measured_rounds in rounds.items():
        best = min(measured_rounds)
        print(
            f"  {name:30s} {args.records / best.seconds:>10,.0f} records/s  "
            f"{floor.seconds / best.seconds:.2f}x floor  "
            f"CPU {best.cpu_seconds / args.records * 1e6:.1f} us/record"
        )
    print(
        "  seconds per round: "
        + ", ".join(
            f"{name.split(' (')[0]} {[round(r.seconds, 2) for r in measured_rounds]}"
            for name, measured_rounds in rounds.items()
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-records", type=int, help="the follower's max_records")
    parser.add_argument(
        "--reader-processes",
        type=int,
        nargs="+",
        default=[0],
        help="the follower's reader_processes (several: one follower each, alternating)",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--baseline", help="a git revision whose follower restores too")
    parser.add_argument("--follower-round", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.follower_round:
        follower_round(KafkaCluster(args.bootstrap, timeout=30.0), args)
        return
    if args.bootstrap:
        report(KafkaCluster(args.bootstrap, timeout=30.0), args)
        return
    with LocalBroker() as broker:
        report(KafkaCluster(broker.bootstrap_servers, timeout=30.0), args)


if __name__ == "__main__":
    main()
