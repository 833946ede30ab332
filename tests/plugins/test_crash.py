"""SIGKILL an application at random moments, with default settings (exactly-once).

A child process runs an `Application` that writes numbered batches (every key of a store
partition gets the batch number, the position moves to it) and is killed at random, often
inside a commit. After each kill the application reopens with the defaults and every store
partition holds data, position and fence of one and the same batch, never a mix and never
less than the child reported as done. The next child replays from there, as Spark replays
an unfinished micro-batch: partitions that applied it skip it. Set IQSTATE_CRASH_ITERATIONS
for the long mode (200).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iqstate import Application, Position, RangeQuery, StateQueryRequest, WindowRangeQuery

ENGINES = ["rocksdb", "lmdb", "sqlite"]
KEYS = 100

CHILD = """
import sys
from iqstate import Application
app = Application("app", {root!r})
app.key_value_store("counts", 3, engine={engine!r}, value_serde="int64")
app.window_store("per-minute", 2, 60_000, 3_600_000, engine={engine!r}, value_serde="int64")
app.start()
first = int(sys.argv[1])
for number in range(first, first + 1_000_000):
    with app.begin_batch(position={{"src": {{0: number}}}}, batch_id=number) as batch:
        batch.put_all("counts", [("key-%03d" % i, number) for i in range({keys})])
        batch.put("per-minute", "w", number, window_start=0)
    print(number, flush=True)
"""


def iterations() -> int:
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "6"))


def open_app(root: Path, engine: str) -> Application:
    app = Application("app", root)
    app.key_value_store("counts", 3, engine=engine, value_serde="int64")
    app.window_store("per-minute", 2, 60_000, 3_600_000, engine=engine, value_serde="int64")
    app.start()
    return app


def committed_batches(app: Application) -> dict[tuple[str, int], int]:
    """The batch number each store partition holds, checking data and position agree."""
    batches: dict[tuple[str, int], int] = {}
    for store, query in (
        ("counts", RangeQuery.with_no_bounds()),
        ("per-minute", WindowRangeQuery.with_window_start_range(0, 0)),
    ):
        result = app.query(StateQueryRequest.in_store(store).with_query(query))
        for partition, answer in result.partition_results.items():
            values = {value for _, value in answer.result}
            position = answer.position
            assert position is not None
            assert len(values) <= 1, f"{store} partition {partition} mixes batches: {values}"
            number = position.partition_offsets("src").get(0, 0)
            if values:
                assert values == {number}, f"{store} {partition}: data and position disagree"
            batches[(store, partition)] = number
    return batches


@pytest.mark.iqstate_slow
@pytest.mark.parametrize("engine", ENGINES)
def test_sigkill_with_default_settings_keeps_every_committed_batch(
    tmp_path: Path, engine: str
) -> None:
    rng = random.Random(f"app-crash-{engine}")
    script = CHILD.format(root=str(tmp_path), engine=engine, keys=KEYS)
    done = 0
    for _ in range(iterations()):
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(done + 1)],
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
        for _ in range(rng.randint(0, 10)):
            reported = int(child.stdout.readline() or reported)
        time.sleep(rng.random() * 0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()

        app = open_app(tmp_path, engine)
        try:
            batches = committed_batches(app)
            assert min(batches.values()) >= reported, "a batch that returned was lost"
            assert max(batches.values()) - min(batches.values()) <= 1, batches
            lags = app.all_local_store_partition_lags()
            assert not any(lag.rebuilt for parts in lags.values() for lag in parts.values())
        finally:
            app.close()
        done = reported
    app = open_app(tmp_path, engine)
    try:
        final = committed_batches(app)
        assert app.query(
            StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
        ).position.dominates(Position.from_map({"src": {0: done}}))
        assert all(number >= done for number in final.values())
    finally:
        app.close()
