"""`iqstate demo --cluster`: the word count at cluster scale, on one machine.

It starts (or, with `--bootstrap-servers`, connects to) a Kafka broker, produces words into
an input topic in chunks (the cluster's analogue of the embedded demo's input files:
`--lines` words every `--interval` seconds, or `--rate` words a second; `--files` chunks in
all; `--seed` seeds the words), runs the distributed pipeline
(`iqstate_spark.cluster_pipeline`: Spark's Kafka source, executors in processes of their own
writing the changelogs of `word-counts` and `words-per-minute`), and starts three serving
instances (`iqstate serve --cluster`, one standby per partition) with the HTTP API and the
state browser page on each. After each word-count batch it prints one line (the batch, the
records written, each instance's freshness: changelog offsets its replicas are behind,
summed, and how many replicas it hosts) and a few counts read over plain HTTP, through a
different instance each time. `--batches N` produces one chunk per batch and exits after
exactly N word-count batches; `--duration` exits after that many seconds.

**Stopping.** The command supervises a worker process in a session of its own, which runs
all of the above. SIGINT or SIGTERM, to the command or to its whole process group (Ctrl-C,
`timeout`, systemd), reaches only the supervisor, which asks the worker to stop: the input
first, then Spark once it has written what was produced, then the instances, then the
broker; exit code 0. A second signal stops it at once. Spark's JVM and executors never get
the group's signal, which would kill them mid-batch with Java traces.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from iqstate import arguments
from iqstate_spark.demo_parts import VOCABULARY, supervised
from iqstate_spark.running import StopSignals

QUERIED_WORDS = ("spark", "kafka", "stream")
"""The words whose counts are read over HTTP after each batch."""


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
    group.add_argument(
        "--rate",
        type=arguments.at_least_one,
        default=None,
        help="words produced per second (default: --lines words every --interval seconds)",
    )


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Producer(threading.Thread):
    """Produces chunks of words into the input topic: every `interval` seconds as a thread
    (`start()`), or one at a time (`produce_chunk`, for `--batches`). `limit`: chunks in all
    (`None`: no end)."""

    def __init__(
        self, bootstrap: str, topic: str, chunk: int, interval: float, seed: int, limit: int | None
    ) -> None:
        super().__init__(name="iqstate-demo-producer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.chunk, self.interval, self.limit = chunk, interval, limit
        self.words = random.Random(seed)
        self.stopped = threading.Event()
        self.produced = 0
        self.chunks = 0
        self._producer: Any = None
        self._ends: dict[str, int] | None = None

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.chunks >= self.limit

    def ends(self) -> dict[str, int]:
        """The input topic's end offset per partition (as Spark's progress writes them),
        asked of the broker once after each chunk (nothing else writes while chunks go one
        at a time)."""
        if self._ends is None:
            self._ends = self._fetch_ends()
        return self._ends

    def _fetch_ends(self) -> dict[str, int]:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "iqstate-demo",
                "logger": _client_logger(),
            }
        )
        try:
            partitions = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            return {
                str(number): consumer.get_watermark_offsets(
                    KafkaTopicPartition(self.topic, number), timeout=10
                )[1]
                for number in partitions
            }
        finally:
            consumer.close()

    def produce_chunk(self) -> None:
        """Produce one chunk and wait until the broker has all of it."""
        from confluent_kafka import Producer as KafkaProducer

        if self._producer is None:
            self._producer = KafkaProducer(
                {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "logger": _client_logger()}
            )
        for _ in range(self.chunk):
            self._producer.produce(self.topic, self.words.choice(VOCABULARY).encode())
        self._producer.flush(30)
        self._ends = None
        self.produced += self.chunk
        self.chunks += 1

    def run(self) -> None:
        while not self.exhausted and not self.stopped.is_set():
            self.produce_chunk()
            self.stopped.wait(self.interval)

    def close(self) -> None:
        """Let go of the Kafka producer (librdkafka's handle ends with it), before the
        broker stops: one still held reconnects and logs 'Connection refused' until exit."""
        self._producer = None


def _client_logger() -> Any:
    """Where the demo's own Kafka clients log: where iqstate's do (`iqstate_kafka` is
    imported only when the cluster demo runs; the embedded one works without it)."""
    from iqstate_kafka.settings import CLIENT_LOGGER

    return CLIENT_LOGGER


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _client_logger()}
    admin = AdminClient(settings)
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


class _Instance:
    """A serving instance this demo started: its port and process."""

    def __init__(self, port: int, process: Any) -> None:
        self.port, self.process = port, process

    def get(self, path: str) -> Any:
        """The JSON answer to `GET path`; `None` if the process ended or did not answer."""
        import httpx

        if self.process.poll() is not None:
            return None
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=2)
        except httpx.HTTPError:
            return None
        return answer.json() if answer.headers.get("content-type") == "application/json" else None

    def freshness(self) -> str:
        """`lag N (R replicas)`: changelog offsets this instance's R replicas are behind,
        summed (`?` while one is unknown)."""
        lags = self.get("/v1/lags")
        if not isinstance(lags, dict):
            return "down"
        replicas = [entry for partitions in lags.values() for entry in partitions.values()]
        if any(entry["lag"] is None for entry in replicas):
            return f"lag ? ({len(replicas)} replicas)"
        return f"lag {sum(int(entry['lag']) for entry in replicas)} ({len(replicas)} replicas)"

    def counts(self) -> str:
        """`word=count, ...` for `QUERIED_WORDS`, read through this instance."""
        read = []
        for word in QUERIED_WORDS:
            answer = self.get(f"/v1/stores/word-counts/keys/{word}")
            if not isinstance(answer, dict):
                read.append(f"{word}=?")
            elif "error" in answer:
                read.append(f"{word}=({answer['error']['code']})")
            else:
                read.append(f"{word}={answer['value']}")
        return ", ".join(read)


def run(args: argparse.Namespace) -> int:
    """Supervise the worker (see the module docstring), or be it."""
    if args.http_port and not _free(args.http_port):
        raise SystemExit(
            f"iqstate demo --cluster: port {args.http_port} is in use (is another demo still "
            "running?); pass --http-port 0 for free ports"
        )
    return supervised(lambda: _work(args), args.iqstate_argv)


class _Batches:
    """The word-count batches of this run, as the sink and Spark's progress report them."""

    def __init__(self, query: Any, sink: Any, topic: str) -> None:
        self.query, self.sink, self.topic = query, sink, topic
        self.seen = 0
        self.last: Any = sink.last_batch

    def new_batch(self) -> bool:
        """True once per word-count batch the sink completed since the last call."""
        if self.sink.last_batch is None or self.sink.last_batch == self.last:
            return False
        self.last = self.sink.last_batch
        self.seen += 1
        return True

    def read_to(self, ends: dict[str, int]) -> bool:
        """Whether the word-count query has read the input topic up to `ends`."""
        progress = self.query.lastProgress
        if not progress or not progress.get("sources"):
            return not any(ends.values())
        offsets = progress["sources"][0].get("endOffset")
        if isinstance(offsets, str):
            offsets = json.loads(offsets)
        read = (offsets or {}).get(self.topic, {})
        return all(int(read.get(number, 0)) >= end for number, end in ends.items())


def _report(
    args: argparse.Namespace,
    signals: Any,
    producer: Producer,
    queries: list[Any],
    batches: _Batches,
    instances: list[_Instance],
) -> None:
    """Print each word-count batch until `--batches` are done, `--duration`, or a stop."""
    started = time.monotonic()
    while not signals.requested.is_set():
        if args.duration and time.monotonic() - started >= args.duration:
            return
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
        if batches.new_batch():
            batch_id, written = batches.last
            fresh = " | ".join(f"i{i} {each.freshness()}" for i, each in enumerate(instances))
            print(
                f"batch {batch_id:>4} | {written:>4} counts written | produced "
                f"{producer.produced:>7,} | {fresh}",
                flush=True,
            )
            via = batches.seen % len(instances)
            if not args.quiet:
                print(f"   via i{via}: {instances[via].counts()}", flush=True)
        # With --batches, one chunk per batch: the next only once the last is read, so each
        # chunk is one batch (Spark runs no batch without new input), and none after the last.
        if args.batches is not None and batches.read_to(producer.ends()):
            if batches.seen >= args.batches or producer.exhausted:
                return
            producer.produce_chunk()
        signals.requested.wait(0.2)


def _work(args: argparse.Namespace) -> int:
    """Run the distributed demo until a stop request, `--batches` or `--duration`."""
    from iqstate_kafka.cluster import KafkaCluster
    from iqstate_kafka.testing import LocalBroker

    from iqstate_spark import cluster_pipeline
    from iqstate_spark.session import cluster_session

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    directory = Path(args.dir).resolve() / "cluster"
    directory.mkdir(parents=True, exist_ok=True)
    broker = None
    instances: list[_Instance] = []
    spark: Any = None
    queries: list[Any] = []
    sinks: list[Any] = []
    chunk = args.lines if args.rate is None else max(1, round(args.rate * args.interval))
    producer: Producer | None = None
    with StopSignals() as signals:
        try:
            if args.bootstrap_servers is None:
                say("starting a Kafka broker (the first run fetches it from Maven Central)...")
                broker = LocalBroker(directory / "kafka").start()
            bootstrap = args.bootstrap_servers or broker.bootstrap_servers  # type: ignore[union-attr]
            app_id, topic = "iqstate-demo", "iqstate-demo-words"
            producer = Producer(bootstrap, topic, chunk, args.interval, args.seed, args.files)
            _create_topic(bootstrap, topic)
            for index in range(3):
                port = args.http_port if index == 0 and args.http_port else _free_port()
                state = directory / f"instance-{index}"
                instances.append(_Instance(port, _start_instance(bootstrap, app_id, state, port)))
                say(f"instance {index}: http://127.0.0.1:{port}/  (state browser and API)")
            say(f"Kafka at {bootstrap}; input topic {topic}; starting Spark...")
            spark = cluster_session("iqstate-demo-cluster", executors=2)
            stores = cluster_pipeline.declare(KafkaCluster(bootstrap), app_id)
            queries, sinks = cluster_pipeline.start(
                spark, stores, topic, directory / "checkpoints", trigger_seconds=1.0
            )
            batches = _Batches(queries[0], sinks[0], topic)
            if args.batches is None:
                producer.start()
            _report(args, signals, producer, queries, batches, instances)
            if signals.requested.is_set():
                print("\nstopping: input, then Spark, then the instances", flush=True)
            producer.stopped.set()
            if producer.is_alive():
                producer.join()
            for query in queries:
                query.processAllAvailable()
        except KeyboardInterrupt:
            print("\ninterrupted again; stopping now", flush=True)
        finally:
            if producer is not None:
                producer.stopped.set()
                if not producer.is_alive():  # a second Ctrl-C does not wait for it
                    producer.close()
            for query in queries:
                query.stop()
            for sink in sinks:
                sink.close()
            if spark is not None:
                spark.stop()
            for instance in instances:
                instance.process.terminate()
            for instance in instances:
                try:
                    instance.process.wait(30)
                except subprocess.TimeoutExpired:
                    instance.process.kill()
            if broker is not None:
                broker.stop()
    # the sink's own count: the report polls, so it can miss batches (and the drain's)
    written = sinks[0].batches_written if sinks else 0
    produced = 0 if producer is None else producer.produced
    print(f"done: {written} word-count batches, {produced:,} words produced; state in {directory}")
    return 0
