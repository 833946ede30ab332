"""Change subscriptions over HTTP on a real broker, through a SIGKILL (SPEC 8.1, 12): three
instances, six partitions, one standby each; a pipeline writing batches all along.

Instance A runs in the test process and writes a batch every quarter second; B and C are
`iqstate serve --cluster` processes. A `RemoteQueryClient` subscribes to the whole store
through B, which hosts some of the partitions and merges the others from A and C; then B is
SIGKILLed. The client must go on to the last batch on another instance: per partition, every
batch the pipeline wrote, each in an event of its own (a replica catching up commits several
at once, and still announces them one by one), in order, each once, a skip only behind a
snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from iqstate_http import RemoteQueryClient
from serving_support import (
    Instance,
    every_partition_served,
    three_instances,
    wait_for,
)

from iqstate import Application, ChangeBatch
from iqstate.runtime import partition_for_bytes

PARTITIONS = 6
KEYS = [f"word-{i:03d}" for i in range(60)]
BY_PARTITION = {
    p: [k for k in KEYS if partition_for_bytes(k.encode(), PARTITIONS) == p]
    for p in range(PARTITIONS)
}


def written(partition: int, batch: int) -> list[tuple[str, int]]:
    """What batch `batch` put in `partition`, in write order (nothing before batch 1)."""
    return [(key, batch * 1000 + KEYS.index(key)) for key in BY_PARTITION[partition] if batch]


def batch_id(batch: ChangeBatch) -> int:
    """The pipeline batch a change batch brings its partition to (its offset of `events`;
    0 before the first)."""
    return batch.position.to_map().get("events", {}).get(0, 0)


class Pipeline:
    """Writes batch 1, 2, ... (every key in each, at offset = batch id) until stopped."""

    def __init__(self, app: Application) -> None:
        self.app, self.last = app, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            batch_id = self.last + 1
            with self.app.begin_batch(position={"events": {0: batch_id}}, batch_id=batch_id) as b:
                b.put_all("counts", [(k, batch_id * 1000 + i) for i, k in enumerate(KEYS)])
            self.last = batch_id
            time.sleep(0.25)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.last


class Follower:
    """Iterates a subscription in a thread, keeping every batch, until each partition got
    to `until` (set once the pipeline stopped)."""

    def __init__(self, url: str) -> None:
        self.batches: list[ChangeBatch] = []
        self.until: int | None = None
        self.error: BaseException | None = None
        self._client = RemoteQueryClient(url, metadata_max_age=1.0)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def reached(self) -> dict[int, int]:
        """Each partition's last batch id."""
        return {batch.partition: batch_id(batch) for batch in list(self.batches)}

    def _run(self) -> None:
        try:
            with self._client.subscribe("counts", reconnect_timeout=90) as subscription:
                for batch in subscription:
                    self.batches.append(batch)
                    if self.done():
                        return
        except BaseException as error:  # the test reports it
            self.error = error
        finally:
            self._client.close()

    def done(self) -> bool:
        """Every partition got to `until` (or the subscription failed: raised)."""
        if self.error is not None:
            raise AssertionError(f"the subscription failed: {self.error!r}")
        reached = self.reached()
        return (
            self.until is not None
            and len(reached) == PARTITIONS
            and min(reached.values()) >= self.until
        )


@pytest.fixture
def three(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[tuple[Application, list[str], list[Instance]]]:
    with three_instances(
        kafka_broker.bootstrap_servers, unique_name("subscriptions"), tmp_path, PARTITIONS
    ) as cluster:
        yield cluster


@pytest.mark.iqstate_slow
def test_a_subscriber_sees_every_batch_through_a_sigkill(
    three: tuple[Application, list[str], list[Instance]],
) -> None:
    app, urls, (b, c) = three
    pipeline = Pipeline(app)
    pipeline.start()
    follower = Follower(b.url)
    try:
        wait_for(
            "the subscriber to follow every partition for a few batches",
            lambda: len(follower.reached()) == PARTITIONS and min(follower.reached().values()) >= 3,
        )
        b.kill()
        survivors = [urls[0], c.url]
        wait_for("the survivors to serve every partition",
                 lambda: every_partition_served(survivors, PARTITIONS), timeout=60)  # fmt: skip
        time.sleep(2)  # a few batches after the failover
    finally:
        follower.until = pipeline.stop()
    wait_for("the subscriber to reach the last batch", follower.done, timeout=90)

    for partition in range(PARTITIONS):
        mine = [batch for batch in follower.batches if batch.partition == partition]
        assert mine[0].snapshot
        had = batch_id(mine[0])
        assert dict((c.key, c.value) for c in mine[0].changes) == dict(written(partition, had))
        for batch in mine[1:]:
            now = batch_id(batch)
            if batch.snapshot:  # a reset: the partition as of that batch, never older
                assert now >= had, (partition, had, now)
                assert dict((c.key, c.value) for c in batch.changes) == dict(
                    written(partition, now)
                )
            else:  # the batch after the last one had, on its own: in order, each once
                assert now == had + 1, f"partition {partition}: batch {now} after {had}"
                expected = written(partition, now)
                assert [(c.key, c.value) for c in batch.changes] == expected, (partition, had, now)
            had = now
        assert had == follower.until
