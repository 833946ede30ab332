"""`iqstate demo --cluster`: the word count at cluster scale, on one machine.

It starts (or, with `--bootstrap-servers`, connects to) a Kafka broker, produces a stream of
words into an input topic, runs the distributed pipeline (`iqstate_spark.cluster_pipeline`:
Spark's Kafka source, executors in processes of their own writing the changelogs of
`word-counts` and `words-per-minute`), and starts three serving instances
(`iqstate serve --cluster`, one standby per partition) with the HTTP API and the state
browser page on each. After each word-count batch it prints one line: the batch, the
records written, and each instance's freshness (how many changelog offsets its replicas
are behind, summed, and how many replicas it hosts). Ctrl-C stops everything it started,
in order and quietly: the input first, then Spark once it has written what was produced,
then the instances, then the broker.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

VOCABULARY_SEED = 11


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `iqstate demo` adds for `--cluster`."""
    group = parser.add_argument_group("distributed mode (--cluster)")
    group.add_argument(
        "--cluster",
        action="store_true",
        help="run the distributed demo (Kafka, Spark, 3 instances)",
    )
    group.add_argument(
        "--bootstrap-servers", default=None, help="use this Kafka instead of starting one"
    )
    group.add_argument("--rate", type=int, default=200, help="words produced per second")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Producer(threading.Thread):
    """Produces `rate` words a second into the input topic until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(name="iqstate-demo-producer", daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stopped = threading.Event()
        self.produced = 0

    def run(self) -> None:
        import random

        from confluent_kafka import Producer as KafkaProducer

        from iqstate_spark.demo import VOCABULARY

        words = random.Random(VOCABULARY_SEED)
        producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
        while not self.stopped.wait(0.1):
            for _ in range(max(1, self.rate // 10)):
                producer.produce(self.topic, words.choice(VOCABULARY).encode())
                self.produced += 1
            producer.poll(0)
        producer.flush(10)


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def _start_instance(bootstrap: str, app_id: str, directory: Path, port: int) -> Any:
    from iqstate_spark.cluster_pipeline import serve_store_options

    command = [
        sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
        "--app-id", app_id, "--application-server", f"127.0.0.1:{port}",
        "--state-dir", str(directory), "--standbys", "1",
    ]  # fmt: skip
    for option in serve_store_options("rocksdb"):
        command += ["--store", option]
    log = (directory.parent / f"instance-{port}.log").open("ab")
    return subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)


def _freshness(port: int) -> str:
    """`lag N/R`: changelog offsets this instance's R replicas are behind, summed."""
    import httpx

    try:
        lags = httpx.get(f"http://127.0.0.1:{port}/v1/lags", timeout=1).json()
    except (httpx.HTTPError, ValueError):
        return "down"
    replicas = [entry for partitions in lags.values() for entry in partitions.values()]
    return f"lag {sum(int(entry['lag']) for entry in replicas)}/{len(replicas)}"


def _report(
    args: argparse.Namespace,
    signals: Any,
    producer: Producer,
    queries: list[Any],
    sinks: list[Any],
    instances: list[tuple[int, Any]],
) -> None:
    """Print a line per word-count batch until Ctrl-C or `--duration`."""
    started, shown = time.monotonic(), None
    while not signals.requested.is_set():
        if args.duration and time.monotonic() - started >= args.duration:
            return
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
        if sinks[0].last_batch is not None and sinks[0].last_batch != shown:
            shown = sinks[0].last_batch
            fresh = " | ".join(f"i{i} {_freshness(port)}" for i, (port, _) in enumerate(instances))
            print(
                f"batch {shown[0]:>4} | {shown[1]:>4} counts written | produced "
                f"{producer.produced:>7,} | {fresh}",
                flush=True,
            )
        signals.requested.wait(0.2)


def run(args: argparse.Namespace) -> int:
    """Run the distributed demo until Ctrl-C (or `--duration` seconds)."""
    from iqstate_kafka.cluster import KafkaCluster
    from iqstate_kafka.local_broker import LocalBroker

    from iqstate_spark import cluster_pipeline
    from iqstate_spark.demo import StopSignals
    from iqstate_spark.session import cluster_session

    directory = Path(args.dir).resolve() / "cluster"
    directory.mkdir(parents=True, exist_ok=True)
    broker = None
    if args.bootstrap_servers is None:
        print("starting a Kafka broker (the first run fetches it from Maven Central)...")
        broker = LocalBroker(directory / "kafka").start()
    bootstrap = args.bootstrap_servers or broker.bootstrap_servers  # type: ignore[union-attr]
    app_id, topic = "iqstate-demo", "iqstate-demo-words"
    instances: list[tuple[int, Any]] = []
    producer = Producer(bootstrap, topic, args.rate)
    spark: Any = None
    queries: list[Any] = []
    sinks: list[Any] = []
    try:
        _create_topic(bootstrap, topic)
        producer.start()
        for index in range(3):
            port = _free_port() if index or args.http_port == 0 else args.http_port
            state = directory / f"instance-{index}"
            instances.append((port, _start_instance(bootstrap, app_id, state, port)))
            print(f"instance {index}: http://127.0.0.1:{port}/  (state browser and API)")
        print(f"Kafka at {bootstrap}; input topic {topic}; starting Spark...", flush=True)
        spark = cluster_session("iqstate-demo-cluster", executors=2)
        # After Spark: PySpark installs its own Ctrl-C handler (cancel every job) with it.
        with StopSignals() as signals:
            stores = cluster_pipeline.declare(KafkaCluster(bootstrap), app_id)
            queries, sinks = cluster_pipeline.start(
                spark, stores, topic, directory / "checkpoints", trigger_seconds=1.0
            )
            _report(args, signals, producer, queries, sinks, instances)
            print("\nstopping: input, then Spark, then the instances", flush=True)
            producer.stopped.set()
            producer.join()
            for query in queries:
                query.processAllAvailable()
    except KeyboardInterrupt:
        print("\ninterrupted again; stopping now", flush=True)
    finally:
        producer.stopped.set()
        for query in queries:
            query.stop()
        for sink in sinks:
            sink.close()
        if spark is not None:
            spark.stop()
        for _, process in instances:
            process.terminate()
        for _, process in instances:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if broker is not None:
            broker.stop()
    print(f"done: {producer.produced:,} words produced; state in {directory}")
    return 0
