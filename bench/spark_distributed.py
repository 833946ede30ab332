"""Distributed mode's Spark sink against Spark's plain Kafka sink, and end-to-end freshness.

Run: `.venv/bin/python bench/spark_distributed.py [--rows 1000000] [--repeats 3]`.

All on one machine, in one run: a real Kafka broker (`LocalBroker`) and Spark with two
executor processes (`local-cluster[2,1,768]`).

1. **Write throughput** of one micro-batch of `--rows` rows (string word, long count, two
   Spark partitions, cached), written to a fresh 4-partition topic by
   - `floor`: Spark's own Kafka sink writing the same rows, no iqstate (key = the word's
     UTF-8 bytes, value = the count as text);
   - `iqstate`: `to_store(ClusterStores(...), ...)`, the distributed sink as it chooses
     (here Spark's Kafka sink with the records made by Spark's expressions,
     `iqstate_spark.spark_records`), then the driver's markers;
   - `iqstate-python-producer`: the same sink held to its other write path (a producer in
     each task via `mapInArrow`, the store's serdes in the executors' Python workers), which
     stores whose records Spark cannot make take (window stores, custom partitioners,
     plugin serdes, JSON of strings, floats or objects).
   The sinks time their second micro-batch, as in a running query whose producers and
   topics are warm (the first batch of a new sink waits for the new topic's leaders and
   the markers' producer; Spark's own producers are cached across rounds). Variants
   alternate, one warm-up round then `--repeats` rounds; the ratio to the floor is per
   round, and of the medians.
2. **Freshness**: the distributed word-count pipeline (`--trigger` seconds per micro-batch) with
   two serving instances (`iqstate serve --cluster`, one standby each): a probe word is
   produced into the input topic and its count polled on the instance hosting its
   partition as a standby; the time from produce to visible, p50 and p99.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka.cluster import KafkaCluster
from iqstate_kafka.testing import LocalBroker
from iqstate_kafka.topics import changelog_topic
from iqstate_spark import ClusterStores
from iqstate_spark.distributed import ClusterSink
from iqstate_spark.session import cluster_session

STORE = "bench"
PARTITIONS = 4


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def write_offsets(checkpoint: Path, batch_id: int) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text('v1\n{}\n{"input":{"0":1}}\n')


def throughput(spark: Any, bootstrap: str, rows: int, repeats: int, work: Path) -> None:
    from pyspark.sql import functions as F

    frame = (
        spark.range(rows)
        .select(
            F.concat(F.lit("word-"), (F.col("id") % 50_000).cast("string")).alias("word"),
            F.col("id").alias("n"),
        )
        .repartition(2)
        .cache()
    )
    frame.count()
    cluster = KafkaCluster(bootstrap)
    times: dict[str, list[float]] = {"floor": [], "iqstate": [], "iqstate-python-producer": []}
    for round_ in range(-1, repeats):  # round -1 warms the executors' Python workers up
        for variant in times:
            app_id = f"bench-{variant}-{round_}-{time.time_ns()}"
            stores = ClusterStores(cluster, app_id)
            stores.key_value_store(STORE, PARTITIONS)
            topic = changelog_topic(app_id, STORE)
            checkpoint = work / app_id
            write_offsets(checkpoint, 0)
            write_offsets(checkpoint, 1)
            if variant == "floor":
                create_topic(bootstrap, topic)
                started = time.perf_counter()
                frame.selectExpr(
                    "CAST(word AS BINARY) AS key", "CAST(CAST(n AS STRING) AS BINARY) AS value"
                ).write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
                    "topic", topic
                ).save()
                elapsed = time.perf_counter() - started
            else:
                path = "auto" if variant == "iqstate" else "python-producer"
                sink = ClusterSink(
                    stores, STORE, "word", "n", None, None, "update", checkpoint, None,
                    write_path=path,
                )  # fmt: skip
                sink(frame.limit(100), 0)  # as in a running query: producers and topic warm
                started = time.perf_counter()
                sink(frame, 1)
                elapsed = time.perf_counter() - started
                sink.close()
                if round_ < 0:
                    print(f"{variant}: written by {sink.write_path}", flush=True)
            times[variant].append(elapsed)
        if round_ < 0:
            for measured in times.values():
                measured.clear()
            continue
        floor = times["floor"][-1]
        print(
            f"round {round_}: "
            + ", ".join(
                f"{name} {rows / t[-1]:,.0f} rows/s ({floor / t[-1]:.0%} of floor)"
                for name, t in times.items()
            ),
            flush=True,
        )
    print("median over rounds:")
    floor_median = statistics.median(times["floor"])
    for name, t in times.items():
        median = statistics.median(t)
        print(f"  {name:<24} {rows / median:>10,.0f} rows/s  {floor_median / median:6.0%} of floor")


def freshness(spark: Any, bootstrap: str, probes: int, trigger: float, work: Path) -> None:
    from iqstate_spark import cluster_pipeline

    app_id, topic = f"fresh-{time.time_ns()}", f"fresh-input-{time.time_ns()}"
    create_topic(bootstrap, topic, 2)
    ports, processes = [], []
    for index in range(2):
        with socket_port() as port:
            ports.append(port)
        command = [
            sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
            "--app-id", app_id, "--application-server", f"127.0.0.1:{port}",
            "--state-dir", str(work / f"instance-{index}"), "--standbys", "1",
        ]  # fmt: skip
        for option in cluster_pipeline.serve_store_options():
            command += ["--store", option]
        processes.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    stores = cluster_pipeline.declare(KafkaCluster(bootstrap), app_id)
    counts = stores.stores[cluster_pipeline.COUNTS]
    queries, sinks = cluster_pipeline.start(
        spark, stores, topic, work / "checkpoints", trigger_seconds=trigger
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    samples: list[float] = []
    try:
        for probe in range(-3, probes):  # three warm-up probes, not counted
            word = f"probe-{probe + 3}"
            partition = counts.partition_of(word, counts.key_serde.serialize(word))
            standby = wait_standby(ports, partition)
            started = time.perf_counter()
            producer.produce(topic, word.encode())
            producer.flush(10)
            url = f"http://127.0.0.1:{standby}/v1/stores/{cluster_pipeline.COUNTS}/keys/{word}"
            while httpx.get(url, timeout=5).json().get("value") is None:
                if time.perf_counter() - started > 60:
                    raise RuntimeError(f"{word} not visible on a standby within 60 s")
                time.sleep(0.01)
            if probe >= 0:
                samples.append(time.perf_counter() - started)
    finally:
        for query in queries:
            query.stop()
        for sink in sinks:
            sink.close()
        for process in processes:
            process.terminate()
            process.wait(30)
    samples.sort()
    p99 = samples[min(len(samples) - 1, round(0.99 * (len(samples) - 1)))]
    print(
        f"freshness (produce -> visible on a standby, {trigger:g} s trigger, {len(samples)} "
        f"probes): p50 {statistics.median(samples):.2f} s, p99 {p99:.2f} s, "
        f"min {samples[0]:.2f} s, max {samples[-1]:.2f} s"
    )


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.probe = socket.socket()
        self.probe.bind(("127.0.0.1", 0))
        return int(self.probe.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.probe.close()


def wait_standby(ports: list[int], partition: int) -> int:
    """The port of the instance hosting `partition` of word-counts as a standby."""
    from iqstate_spark import cluster_pipeline

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for port in ports:
            try:
                roles = httpx.get(f"http://127.0.0.1:{port}/v1/partitions", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                continue
            for entry in roles:
                if (
                    entry.get("store") == cluster_pipeline.COUNTS
                    and entry["partition"] == partition
                    and entry["role"] == "STANDBY"
                ):
                    return port
        time.sleep(0.2)
    raise RuntimeError(f"no standby of partition {partition} within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--trigger", type=float, default=0.5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iqstate-bench-spark-"))
    try:
        with LocalBroker(work / "kafka") as broker:
            spark = cluster_session("iqstate-bench", executors=2)
            try:
                throughput(spark, broker.bootstrap_servers, args.rows, args.repeats, work)
                freshness(spark, broker.bootstrap_servers, args.probes, args.trigger, work)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
