"""A long distributed Spark run: does anything on the driver grow with every micro-batch?

Run: `.venv/bin/python bench/spark_long_run.py [--batches 2000] [--every 200]`.

The distributed word-count pipeline (`iqstate_spark.cluster_pipeline`: a key-value store of
counts and a window store of one-minute counts, two streaming queries) runs on Spark with
two executor processes against a real local broker, with no trigger interval (each query
starts its next micro-batch as soon as the last one ends). A producer feeds the input topic
all along: `--words-per-second` words drawn from a fixed vocabulary, timestamped now.

Every `--every` batches of the counts query it prints, for the batches since the last line:
the median time per batch of each query (Spark's `triggerExecution`), the driver JVM's heap
in use after a full GC, the resident memory of the driver's JVM and of this Python process,
and this process's open file descriptors and threads. The last line gives the last window's
figures as ratios of the first window's: flat is 1.0.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka.cluster import KafkaCluster
from iqstate_kafka.testing import LocalBroker
from iqstate_spark import cluster_pipeline
from iqstate_spark.session import cluster_session

VOCABULARY = [f"word-{n}" for n in range(500)]


def resident_mb(pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def feed(bootstrap: str, topic: str, words_per_second: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    pick = random.Random(7)
    while not stop.is_set():
        for _ in range(max(1, words_per_second // 10)):
            producer.produce(topic, pick.choice(VOCABULARY).encode())
        producer.poll(0)
        stop.wait(0.1)
    producer.flush(10)


class DriverProbe:
    """What the driver holds, read through PySpark's gateway and /proc."""

    def __init__(self, spark: Any) -> None:
        jvm = spark.sparkContext._jvm
        self.runtime = jvm.java.lang.Runtime.getRuntime()
        self.system = jvm.java.lang.System
        self.jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())

    def sample(self) -> dict[str, float]:
        self.system.gc()
        return {
            "heap_mb": (self.runtime.totalMemory() - self.runtime.freeMemory()) / 2**20,
            "jvm_rss_mb": resident_mb(self.jvm_pid),
            "python_rss_mb": resident_mb("self"),
            "fds": len(os.listdir("/proc/self/fd")),
            "threads": threading.active_count(),
        }


def batch_seconds(query: Any, after: int) -> tuple[list[float], int]:
    """Durations of the query's batches numbered above `after` (from its recent progress),
    and the highest batch id seen."""
    durations, last = [], after
    for progress in query.recentProgress:
        if progress["batchId"] > after and progress["numInputRows"] > 0:
            durations.append(progress["durationMs"]["triggerExecution"] / 1000)
        last = max(last, progress["batchId"])
    return durations, last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--words-per-second", type=int, default=500)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iqstate-bench-long-"))
    stop = threading.Event()
    try:
        with LocalBroker(work / "kafka") as broker:
            bootstrap = broker.bootstrap_servers
            topic = "long-run-input"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
            feeder = threading.Thread(
                target=feed, args=(bootstrap, topic, args.words_per_second, stop), daemon=True
            )
            feeder.start()
            spark = cluster_session("iqstate-long-run", executors=2)
            stores = cluster_pipeline.declare(KafkaCluster(bootstrap), "long-run")
            queries, sinks = cluster_pipeline.start(
                spark, stores, topic, work / "checkpoints", trigger_seconds=0
            )
            probe = DriverProbe(spark)
            rows: list[dict[str, float]] = []
            seen = {query.name: -1 for query in queries}
            started = time.monotonic()
            try:
                while seen[cluster_pipeline.COUNTS] < args.batches:
                    time.sleep(max(1.0, args.every / 20))
                    for query in queries:
                        if query.exception() is not None:
                            raise RuntimeError(f"{query.name} failed: {query.exception()}")
                    counts_query = queries[0]
                    _, latest = batch_seconds(counts_query, -1)
                    if latest - seen[counts_query.name] < args.every and latest < args.batches:
                        continue
                    row: dict[str, float] = {"batch": latest}
                    for query in queries:
                        durations, seen[query.name] = batch_seconds(query, seen[query.name])
                        row[query.name] = statistics.median(durations) if durations else 0.0
                    row.update(probe.sample())
                    rows.append(row)
                    print(
                        f"batch {latest:>5} ({time.monotonic() - started:5.0f} s): per batch "
                        + ", ".join(f"{q.name} {row[q.name] * 1000:4.0f} ms" for q in queries)
                        + f"; heap {row['heap_mb']:6.1f} MB, driver JVM {row['jvm_rss_mb']:6.0f}"
                        f" MB, Python {row['python_rss_mb']:5.0f} MB, {row['fds']:.0f} fds, "
                        f"{row['threads']:.0f} threads",
                        flush=True,
                    )
            finally:
                stop.set()
                feeder.join(30)
                for query in queries:
                    query.stop()
                for sink in sinks:
                    sink.close()
                spark.stop()
            first, last = rows[0], rows[-1]
            print(
                "last window / first window: "
                + ", ".join(
                    f"{name} {last[name] / first[name]:.2f}x"
                    for name in (*seen, "heap_mb", "jvm_rss_mb", "python_rss_mb", "fds")
                    if first[name]
                )
            )
    finally:
        stop.set()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
