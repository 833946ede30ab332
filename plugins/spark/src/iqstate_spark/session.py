"""Spark sessions that stay on loopback and keep the console readable.

`local_session`: Spark in this process (`local[2]`), for the embedded pipeline.
`cluster_session`: a driver here and executors in separate JVMs with their own Python
workers (`local-cluster[N,cores,MB]`, Spark's in-process master and workers), with Spark's
Kafka connector: what distributed mode runs on, short of other machines.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _builder(master: str, name: str, shuffle_partitions: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers run this interpreter, so they import the packages installed with it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(master)
        .appName(name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )


def local_session(name: str, shuffle_partitions: int = 2, kafka: bool = False) -> Any:
    """`local[2]` Spark bound to 127.0.0.1, UTC session time zone, no UI, no progress bars;
    with Spark's Kafka connector when `kafka` (fetched on first use)."""
    builder = _builder("local[2]", name, shuffle_partitions)
    if kafka:
        builder = _with_kafka_connector(builder)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def cluster_session(
    name: str,
    executors: int = 2,
    executor_memory_mb: int = 768,
    shuffle_partitions: int = 2,
    kafka: bool = True,
) -> Any:
    """A driver here and `executors` executor processes of one core each, bound to
    127.0.0.1; with Spark's Kafka connector when `kafka` (fetched on first use).

    Executors run this interpreter (`sys.executable`) for their Python workers, so they see
    the same installed packages (on machines of their own they need the same environment).
    """
    master = f"local-cluster[{executors},1,{executor_memory_mb}]"
    builder = (
        _builder(master, name, shuffle_partitions)
        .config("spark.executor.memory", f"{executor_memory_mb}m")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "iqstate_spark.worker_daemon")
    )
    if kafka:
        builder = _with_kafka_connector(builder)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _with_kafka_connector(builder: Any) -> Any:
    from iqstate_spark.connector import kafka_connector_jars

    return builder.config("spark.jars", ",".join(str(path) for path in kafka_connector_jars()))
