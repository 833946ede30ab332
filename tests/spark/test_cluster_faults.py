"""A distributed Spark run survives what production does to it: an executor SIGKILLed
mid-stream, and the broker restarted mid-stream. What is checked is what a user checks
through `RemoteQueryClient`: every count equals the ground truth computed from the
produced events, and every store partition's position equals the input's end offsets
(nothing lost, nothing applied twice)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from iqstate_http import RemoteQueryClient
from iqstate_kafka import LocalBroker
from iqstate_spark.cluster_pipeline import COUNTS
from pipeline_support import running_pipeline, wait_converged, wait_for

CONVERGE_TIMEOUT = 300.0  # a loaded 2-core machine runs Spark, Kafka and two instances


def test_an_executor_killed_mid_stream(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    with running_pipeline(bootstrap, unique_name("app"), unique_name("input"), tmp_path, 2) as (
        source,
        driver,
        instances,
    ):
        source.produce(900)  # six batches at 150 offsets per trigger
        driver.start()
        wait_for("the first batch", lambda: driver.batches(COUNTS), CONVERGE_TIMEOUT)
        executors = driver.executor_pids()
        assert executors, driver.failure()
        os.kill(executors[0], signal.SIGKILL)  # its tasks fail; Spark runs them elsewhere
        source.produce(300)
        with RemoteQueryClient(instances[0].url) as client:
            snapshot = wait_converged(
                client,
                source,
                "exact counts and positions after the executor died",
                CONVERGE_TIMEOUT,
                [driver, *instances],
            )
        assert sum(snapshot.counts.values()) == source.produced, "nothing lost or doubled"
        assert driver.process is not None and driver.process.poll() is None, driver.failure()
        assert executors[0] not in driver.executor_pids()


def test_the_broker_restarted_mid_stream(unique_name: Callable[[str], str], tmp_path: Path) -> None:
    with LocalBroker(tmp_path / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        with running_pipeline(bootstrap, unique_name("app"), unique_name("input"), tmp_path, 2) as (
            source,
            driver,
            instances,
        ):
            source.produce(900)
            driver.start()
            wait_for("the first batch", lambda: driver.batches(COUNTS), CONVERGE_TIMEOUT)
            broker.restart()  # SIGTERM, then the same data and ports
            source.produce(300)
            with RemoteQueryClient(instances[0].url) as client:
                snapshot = wait_converged(
                    client,
                    source,
                    "exact counts and positions after the broker restarted",
                    CONVERGE_TIMEOUT,
                    [driver, *instances],
                )
            assert sum(snapshot.counts.values()) == source.produced, "nothing lost or doubled"
            assert driver.process is not None and driver.process.poll() is None, driver.failure()
