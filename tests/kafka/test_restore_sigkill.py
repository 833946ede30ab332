"""SIGKILL at random moments of a restore, its follower reading in its own process or in
worker processes (`Follower(reader_processes=2)`): a process restores a replica of every
partition from a real broker into RocksDB and is killed, again and again, each time at a
random moment (starting up, reading, applying, committing); a last one restores to the
end. Every key must then hold its true value: whatever a killed restore committed (data,
offset, position and fence in one atomic commit) is resumed from, never applied twice out
of order, never lost, and units its workers had read but it had not applied are read again.
IQSTATE_CRASH_ITERATIONS sets how many kills (default 3)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from iqstate_kafka import KafkaCluster, ensure_changelog_topics
from test_reader_processes import PARTITIONS, STORE, expected, write_batches

RESTORER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from iqstate_kafka import KafkaCluster
from replica_support import eventually
from test_reader_processes import caught_up, contents, restoring
cluster = KafkaCluster(sys.argv[1], timeout=10.0)
with restoring(cluster, sys.argv[2], Path(sys.argv[3]), processes=int(sys.argv[4])) as (app, s):
    eventually(caught_up(s), "every partition restored", within=120.0)
    found = {key.hex(): value.hex() for key, value in contents(app).items()}
print(json.dumps(found), flush=True)
"""


def iterations() -> int:
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "3"))


def restorer(cluster: KafkaCluster, application_id: str, state: Path, processes: int) -> list[str]:
    here = str(Path(__file__).parent)
    return [
        sys.executable, "-c", RESTORER, cluster.bootstrap_servers, application_id, str(state),
        str(processes), here,
    ]  # fmt: skip


@pytest.mark.parametrize("processes", [0, 2], ids=["in-process", "2-reader-processes"])
def test_a_restore_killed_at_random_moments_ends_with_every_true_value(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path, processes: int
) -> None:
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    truth = write_batches(cluster, application_id, batches=30, keys=40_000)
    command = restorer(cluster, application_id, tmp_path / "state", processes)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    started = time.monotonic()
    full = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300)
    duration = time.monotonic() - started  # a whole restore, start to exit
    assert json.loads(full.stdout) == {k.hex(): v.hex() for k, v in expected(truth).items()}
    state = tmp_path / "killed"
    command = restorer(cluster, application_id, state, processes)
    kills = []
    for _ in range(iterations()):
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        delay = rng.uniform(0.0, duration)
        try:
            child.wait(delay)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            kills.append(round(delay, 2))
    last = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, f"seed {seed}, killed after {kills} s: {last.stderr[-2000:]}"
    found = {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads(last.stdout).items()}
    assert found == expected(truth), f"seed {seed}, killed after {kills} s"
