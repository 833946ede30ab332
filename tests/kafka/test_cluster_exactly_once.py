"""Exactly-once across the cluster: a writer SIGKILLed at random and restarted, replaying.

The writer is an application of the cluster in its own process. Batch `b` puts `b<b>` and
`last`, and deletes `b<b-5>`; after a kill the writer restarts a few batches before the
last one it reported done, as a pipeline replays batches it is not sure of. A replica that
applied a replayed batch twice would bring a deleted key back or move `last` backwards;
every replica must hold exactly one application of each batch, and every partition the
position of the last batch.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from iqstate_kafka import KafkaCluster

from iqstate import Application, Position, PositionBound, RangeQuery, StateQueryRequest

PARTITIONS = 4

WRITER = """
import sys
from iqstate import Application
from iqstate_kafka import KafkaCluster
app = Application({app_id!r}, {state!r}, application_server="127.0.0.1:{port}",
                  num_standby_replicas=1, cluster=KafkaCluster({bootstrap!r}))
app.key_value_store("s", {partitions}, engine="rocksdb", value_serde="int64")
app.start()
first, last = int(sys.argv[1]), int(sys.argv[2])
for b in range(first, last + 1):
    with app.begin_batch(position={{"events": {{0: b}}}}, batch_id=b) as batch:
        batch.put("s", "b%d" % b, b)
        batch.put("s", "last", b)
        if b > 5:
            batch.delete("s", "b%d" % (b - 5))
    print(b, flush=True)
app.close()
"""


def expected(last: int) -> dict[str, int]:
    return {"last": last} | {f"b{b}": b for b in range(max(1, last - 4), last + 1)}


@pytest.mark.iqstate_slow
def test_a_writer_killed_at_random_and_replaying_leaves_one_application_of_each_batch(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("exactly-once")
    rng = random.Random(app_id)
    server = Application(
        app_id, tmp_path / "server", application_server="127.0.0.1:7",
        num_standby_replicas=1, cluster=KafkaCluster(kafka_broker.bootstrap_servers),
    )  # fmt: skip
    server.key_value_store("s", PARTITIONS, engine="rocksdb", value_serde="int64")
    server.start()
    script = WRITER.format(
        app_id=app_id, state=str(tmp_path / "writer"), port=8,
        bootstrap=kafka_broker.bootstrap_servers, partitions=PARTITIONS,
    )  # fmt: skip
    reported = 0
    try:
        for _ in range(4):
            first = max(1, reported - rng.randint(0, 3))  # replay what may not have landed
            child = subprocess.Popen(
                [sys.executable, "-c", script, str(first), "1000000"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None and child.stderr is not None
            line = child.stdout.readline()
            if not line:
                child.wait(timeout=30)
                pytest.fail(f"the writer failed before its first batch:\n{child.stderr.read()}")
            reported = int(line)
            for _ in range(rng.randint(5, 40)):
                reported = int(child.stdout.readline() or reported)
            time.sleep(rng.random() * 0.05)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            child.stdout.close()
            child.stderr.close()

        # The pipeline finally completes: a last run replays from before the last batch
        # reported done (the killed run may have landed more, partly) to a fixed end.
        last = reported + 300  # beyond anything the killed run can have reached
        finished = subprocess.run(
            [sys.executable, "-c", script, str(max(1, reported - 2)), str(last)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert finished.returncode == 0, finished.stderr
        contents = _settled_contents(server, last)
        assert contents == expected(last), "a batch was applied twice, or one is missing"
        position = Position.from_map({"events": {0: last}})
        for partition in range(PARTITIONS):
            answer = server.query(
                StateQueryRequest.in_store("s")
                .with_query(RangeQuery.with_no_bounds())
                .with_partitions({partition})
            ).partition_results[partition]
            assert answer.position == position, (partition, answer.position)
    finally:
        server.close()


def _settled_contents(server: Application, at_least: int) -> dict[str, int]:
    """The store's contents once every partition hosted here is RUNNING and has stopped
    moving at a position of at least `at_least`."""
    bound = PositionBound.at(Position.from_map({"events": {0: at_least}}))
    deadline = time.monotonic() + 90
    previous: dict[str, int] | None = None
    while time.monotonic() < deadline:
        roles = [role.state for _, _, role, _ in server.local_partitions()]
        if len(roles) == PARTITIONS and set(roles) == {"RUNNING"}:
            result = server.query(
                StateQueryRequest.in_store("s")
                .with_query(RangeQuery.with_no_bounds())
                .with_position_bound(bound)
            )
            if all(answer.is_success for answer in result.partition_results.values()):
                contents: dict[str, int] = {}
                for answer in result.partition_results.values():
                    with answer.result as pairs:
                        contents.update(pairs)
                if contents == previous:
                    return contents
                previous = contents
        time.sleep(0.5)
    pytest.fail("the server did not settle with every partition running at the last batch")
