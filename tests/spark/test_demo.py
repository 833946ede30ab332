"""`iqstate demo` as a user runs it: exactly the batches asked for, and a quiet stop.

One test, three runs of the demo in one directory (each run starts its own Spark): a first
run and a restart with `--batches`, then a run stopped after its first batch with SIGTERM
to its whole process group, as systemd and `timeout` send it (Ctrl-C, SIGINT to the group,
takes the same path: the command hands either to its worker as a request to stop, and
Spark's JVM, in the worker's session, gets neither).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from iqstate_spark.demo import build_app

from iqstate import Position, RangeQuery, StateQueryRequest

NOISE = re.compile(r"^\s+at [\w.$/]+\(|Exception in thread|Py4J\w*Error|Traceback|StackOverflow")
"""Java stack frames and exceptions, Python tracebacks: none belongs in a normal run's stderr."""


def demo(directory: Path, stderr: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "iqstate.cli", "demo", "--dir", str(directory), "--quiet"]
    command += ["--interval", "0.1", "--lines", "20", "--http-port", "0", *extra]
    with stderr.open("w") as errors:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True
        )


def batch_ids(output: str) -> list[int]:
    return [int(line.split()[1]) for line in output.splitlines() if line.startswith("batch ")]


def noise(stderr: Path) -> list[str]:
    return [line for line in stderr.read_text().splitlines() if NOISE.search(line)]


def run_to_end(directory: Path, stderr: Path, *extra: str) -> str:
    process = demo(directory, stderr, *extra)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output + stderr.read_text()
    assert noise(stderr) == []
    return output


@pytest.mark.iqstate_slow
def test_demo_runs_the_batches_asked_for_and_stops_quietly_on_a_group_sigterm(
    tmp_path: Path,
) -> None:
    state = tmp_path / "demo"
    first = run_to_end(state, tmp_path / "first.err", "--batches", "3")
    assert batch_ids(first) == [0, 1, 2]
    assert "done: 3 word-count batches" in first
    # both queries finished every file: the per-minute store is through the last batch too
    assert "(through batch 2)\ndone:" in first

    restarted = run_to_end(state, tmp_path / "restart.err", "--batches", "2")
    assert batch_ids(restarted) == [3, 4]
    assert "done: 2 word-count batches" in restarted

    running = demo(state, tmp_path / "sigterm.err")
    assert running.stdout is not None
    first_batch = next(line for line in running.stdout if line.startswith("batch "))
    os.killpg(running.pid, signal.SIGTERM)
    rest, _ = running.communicate(timeout=120)
    assert running.returncode == 0, rest
    assert batch_ids(first_batch) == [5]
    assert "interrupted; stopping" in rest and "done:" in rest
    assert noise(tmp_path / "sigterm.err") == []

    files = sorted((state / "inbox").glob("words-*.txt"))
    words = sum(len(line.split()) - 2 for path in files for line in path.read_text().splitlines())
    app = build_app(state)
    with app:
        lags = app.all_local_store_partition_lags()
        assert not any(lag.rebuilt for partitions in lags.values() for lag in partitions.values())
        counts = app.query(
            StateQueryRequest.in_store("word-counts").with_query(RangeQuery.with_no_bounds())
        )
        assert sum(v for r in counts.partition_results.values() for _, v in r.result) == words
        last_file = Position.from_map({"demo-files": {0: len(files) - 1}})
        assert {r.position for r in counts.partition_results.values()} == {last_file}


BLOCK_KAFKA = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "iqstate_kafka":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
from iqstate.cli import main
sys.exit(main(["demo", "--help"]))
"""


def test_the_embedded_demo_needs_no_iqstate_kafka() -> None:
    # iqstate-spark does not depend on iqstate-kafka: only --cluster imports it.
    shown = subprocess.run(
        [sys.executable, "-c", BLOCK_KAFKA], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert "--batches" in shown.stdout and "unavailable" not in shown.stderr + shown.stdout
