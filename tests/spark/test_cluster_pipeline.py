"""The pipeline at cluster scale, end to end on a real broker: a Kafka input topic read by
Spark's own Kafka source, the micro-batches written to the changelogs by executor processes
separate from the driver (`local-cluster`), and three serving instances (one standby each)
following them. What is checked is what a user checks, through `RemoteQueryClient`: every
count equals the ground truth computed here from the produced events, and every store
partition's position equals the input offsets of the last batch; also after the driver and
a serving instance are SIGKILLed mid-stream and restarted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from iqstate_http import RemoteQueryClient
from iqstate_kafka import LocalBroker
from iqstate_spark.cluster_pipeline import COUNTS
from pipeline_support import (
    Driver,
    Input,
    Instance,
    converged,
    read_all,
    running_pipeline,
    wait_converged,
    wait_for,
)

CONVERGE_TIMEOUT = 240.0  # a loaded 2-core machine runs Spark, Kafka and three instances


@pytest.fixture
def deployment(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[tuple[Input, Driver, list[Instance]]]:
    """An input topic, three serving instances and the pipeline's driver, all stopped after."""
    bootstrap = kafka_broker.bootstrap_servers
    with running_pipeline(bootstrap, unique_name("app"), unique_name("input"), tmp_path) as running:
        yield running


def test_input_topic_to_three_serving_instances_exactly(
    deployment: tuple[Input, Driver, list[Instance]],
) -> None:
    source, driver, instances = deployment
    source.produce(600)
    driver.start()
    wait_for("the first batch", lambda: driver.batches(COUNTS), CONVERGE_TIMEOUT)
    executors = driver.executor_pids()
    assert len(executors) == 2 and driver.process is not None, driver.failure()
    assert driver.process.pid not in executors, "executors are processes of their own"
    source.produce(300)  # while the query runs
    with RemoteQueryClient(instances[0].url) as client:
        snapshot = wait_converged(
            client,
            source,
            "every count and position to match the input",
            CONVERGE_TIMEOUT,
            [driver, *instances],
        )
    assert sum(snapshot.counts.values()) == source.produced
    batches = driver.batches(COUNTS)
    assert len(batches) >= 2 and sum(records for _, records in batches) >= len(snapshot.counts)


def test_driver_and_a_serving_instance_killed_mid_stream(
    deployment: tuple[Input, Driver, list[Instance]],
) -> None:
    source, driver, instances = deployment
    source.produce(900)  # six batches at 150 offsets per trigger
    driver.start()
    with RemoteQueryClient(instances[0].url) as client:
        wait_for("two batches", lambda: len(driver.batches(COUNTS)) >= 2, CONVERGE_TIMEOUT)
        victim = instances[2]
        victim.kill()
        driver.kill()  # mid-stream: batches are pending
        killed_at = driver.batches(COUNTS)[-1][0]
        reads = [read_all(client) for _ in range(3)]  # answered or failed per partition
        assert any(r.positions for r in reads), "the survivors keep answering"
        source.produce(300)
        driver.start()
        victim.start()
        resumed = wait_for("the restarted driver's batches", lambda: driver.batches(COUNTS))
        assert resumed[0][0] <= killed_at + 1, "Spark resumes from its checkpoint, not anew"
        snapshot = wait_converged(
            client,
            source,
            "exact counts and positions after both restarts",
            CONVERGE_TIMEOUT,
            [driver, *instances],
        )
        assert sum(snapshot.counts.values()) == source.produced, "nothing lost or doubled"
        # The restarted instance rejoined: it hosts replicas again and routes queries too.
        wait_for("the restarted instance to host replicas", lambda: hosted(victim.url))
        with RemoteQueryClient(victim.url) as direct:
            assert converged(direct, source) is not None


def hosted(url: str) -> list[object]:
    try:
        return list(httpx.get(url + "/v1/partitions", timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return []
