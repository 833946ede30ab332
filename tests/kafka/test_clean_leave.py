"""A serving instance stopped with SIGTERM drains: it leaves the cluster first and keeps
answering while the other instances take its partitions over, then exits cleanly.

Two `iqstate serve` instances on the session's broker and a writer in this process."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from iqstate_kafka import LocalBroker
from serving_support import every_partition_served, serving_pair, wait_for

PARTITIONS = 4
KEYS = [f"key-{i:02d}" for i in range(20)]


def test_sigterm_leaves_the_cluster_then_answers_until_the_others_have_taken_over(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    with serving_pair(
        kafka_broker.bootstrap_servers, unique_name("leave"), tmp_path, PARTITIONS, "info"
    ) as (instances, writer):
        leaving, staying = instances
        values = {key: i for i, key in enumerate(KEYS)}
        with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put_all("counts", list(values.items()))
        wait_for("the batch on both", lambda: all(_answers(i.url, values) for i in instances))

        assert leaving.process is not None
        leaving.process.send_signal(signal.SIGTERM)
        said_leaving, answered_while_leaving = False, 0
        deadline = time.monotonic() + 30
        while leaving.process.poll() is None and time.monotonic() < deadline:
            try:
                ready = httpx.get(leaving.url + "/v1/ready", timeout=2)
                if ready.status_code == 503 and "leaving its cluster" in ready.text:
                    said_leaving = True
                    if _answers(leaving.url, values):  # every key, right, while leaving
                        answered_while_leaving += 1
            except httpx.HTTPError:
                pass  # it stopped listening
        assert leaving.process.wait(timeout=30) == 0, leaving.output()
        assert said_leaving, leaving.output()
        assert answered_while_leaving >= 1, "it answered while the others took over"
        wait_for(
            "the staying instance running every partition",
            lambda: every_partition_served([staying.url], PARTITIONS),
        )
        assert _answers(staying.url, values)
        assert "answering" in leaving.output() and "more while the other" in leaving.output()

        # The last instance has nobody to hand its partitions to: it stops without a drain.
        assert staying.stop() == 0, staying.output()
        assert "SIGTERM: no other instance takes over; stopping now" in staying.output()
        assert "more while the other instances take over" not in staying.output()


def _answers(url: str, values: dict[str, int]) -> bool:
    """Whether `url` answers every key with its value (a 200 each)."""
    for key, value in values.items():
        answer = httpx.get(f"{url}/v1/stores/counts/keys/{key}", timeout=5)
        if answer.status_code != 200 or answer.json()["value"] != value:
            return False
    return True
