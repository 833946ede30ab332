"""A replica restoring its changelog from nothing, killed with SIGKILL at random moments of
the restore, again and again: each restart opens what the last one left and goes on, and the
last one ends with every key's true value and the end of every changelog committed. A user
checks exactly that after a crash: the values, and that the replica caught up.

IQSTATE_CRASH_ITERATIONS sets how many kills (default 3; 50 for the long mode)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from iqstate_kafka import BatchWriter, KafkaCluster, ensure_changelog_topics
from iqstate_kafka.standalone import StandaloneReplicas
from replica_support import eventually

from iqstate import Application, Position, RangeQuery, StateQueryRequest
from iqstate.runtime.partitioner import partition_for_bytes

STORE = "s"
PARTITIONS = 4
BATCHES, KEYS = 30, 12_000


def kills() -> int:
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "3"))


@contextmanager
def replica(
    bootstrap: str, application_id: str, state_dir: Path
) -> Iterator[tuple[Application, StandaloneReplicas]]:
    standalone = StandaloneReplicas(KafkaCluster(bootstrap, timeout=10.0), max_records=2_000)
    app = Application(application_id, state_dir, cluster=standalone)
    app.key_value_store(STORE, PARTITIONS, engine="rocksdb", key_serde="bytes", value_serde="bytes")
    with app:
        yield app, standalone


def restore_until_killed(bootstrap: str, application_id: str, state_dir: Path) -> None:
    """The child: restore, saying when it started, until it is killed."""
    with replica(bootstrap, application_id, state_dir):
        print("restoring", flush=True)
        time.sleep(600)


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from test_restore_sigkill import restore_until_killed
restore_until_killed(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
"""


def write_changelog(cluster: KafkaCluster, application_id: str) -> dict[bytes, bytes]:
    """Batches of puts and deletes over `KEYS` keys; the contents they leave."""
    rng = random.Random(11)
    truth: dict[bytes, bytes | None] = {}
    with BatchWriter(cluster, application_id) as writer:
        for batch_id in range(BATCHES):
            entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
            for _ in range(KEYS // 2):
                key = b"key-%06d" % rng.randrange(KEYS)
                value = None if rng.random() < 0.1 else b"%d-%d" % (batch_id, rng.randrange(10**9))
                entries.setdefault((STORE, partition_for_bytes(key, PARTITIONS)), []).append(
                    (key, value)
                )
                truth[key] = value
            writer.write(
                entries,
                batch_id=batch_id,
                position=Position.from_map({"source": {0: batch_id}}),
                stores={STORE: PARTITIONS},
            )
    return {key: value for key, value in truth.items() if value is not None}


def contents(app: Application) -> dict[bytes, bytes]:
    result = app.query(StateQueryRequest.in_store(STORE).with_query(RangeQuery.with_no_bounds()))
    found: dict[bytes, bytes] = {}
    for answer in result.partition_results.values():
        assert answer.is_success, answer
        with answer.result as pairs:
            found.update(pairs)
    return found


def caught_up(standalone: StandaloneReplicas) -> Callable[[], bool]:
    def check() -> bool:
        lags = standalone.follower.lags()
        return len(lags) == PARTITIONS and not any(lags.values())

    return check


def test_a_restore_killed_at_random_moments_ends_with_the_true_values(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    truth = write_changelog(cluster, application_id)
    state_dir = tmp_path / "replica"
    here = str(Path(__file__).parent)
    # a first, undisturbed restore in this process says how long one takes
    started = time.monotonic()
    with replica(cluster.bootstrap_servers, application_id, tmp_path / "timing") as (
        app,
        standalone,
    ):
        eventually(caught_up(standalone), "a restore from nothing", within=120.0)
        restore_seconds = time.monotonic() - started
        assert contents(app) == truth
    rng = random.Random(5)
    for kill in range(kills()):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, cluster.bootstrap_servers, application_id,
             str(state_dir), here],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            assert line == "restoring", (
                f"restart {kill} did not open what the last kill left: {child.stderr.read()}"
            )
            time.sleep(rng.uniform(0, restore_seconds))
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
    with replica(cluster.bootstrap_servers, application_id, state_dir) as (app, standalone):
        eventually(caught_up(standalone), "the restore after the kills", within=120.0)
        assert contents(app) == truth
