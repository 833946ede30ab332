"""Kill the demo's driver mid-stream, restart it, and every count is exactly right.

The demo runs in its own process group; SIGKILL takes down the Python driver and its JVM at
once, as a crashed driver machine would. The restarted demo resumes from Spark's checkpoint
and iqstate's RocksDB stores; when it has caught up, every count equals the ground truth
computed in plain Python from the same input files, and every store partition's position
is the offsets of the last batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from iqstate_spark.demo import build_app

from iqstate import Position, RangeQuery, StateQueryRequest, WindowRangeQuery

FILES = 8


def demo(directory: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "iqstate.cli", "demo", "--dir", str(directory), "--quiet"]
    command += [
        "--files",
        str(FILES),
        "--interval",
        "0.3",
        "--lines",
        "50",
        "--http-port",
        "0",
        *extra,
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def truth(inbox: Path) -> tuple[Counter[str], Counter[tuple[str, int]]]:
    words: Counter[str] = Counter()
    minutes: Counter[tuple[str, int]] = Counter()
    for path in sorted(inbox.glob("words-*.txt")):
        for line in path.read_text().splitlines():
            day, clock, *tokens = line.split(" ")
            moment = datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC)
            minute = int(moment.timestamp()) // 60 * 60_000
            words.update(tokens)
            minutes.update((token, minute) for token in tokens)
    return words, minutes


@pytest.mark.iqstate_slow
def test_killed_driver_restarts_and_counts_exactly_once(tmp_path: Path) -> None:
    first = demo(tmp_path)
    assert first.stdout is not None
    seen = 0
    for line in first.stdout:
        if line.startswith("batch"):
            seen += 1
            if seen == 3:
                break
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert seen == 3, "the demo processed batches before it was killed"

    second = demo(tmp_path)
    output, _ = second.communicate(timeout=300)
    assert second.returncode == 0, output
    assert len(list((tmp_path / "inbox").glob("words-*.txt"))) == FILES

    words, minutes = truth(tmp_path / "inbox")
    app = build_app(tmp_path)
    with app:
        counts = app.query(
            StateQueryRequest.in_store("word-counts").with_query(RangeQuery.with_no_bounds())
        )
        stored = {k: v for r in counts.partition_results.values() for k, v in r.result}
        assert stored == dict(words)
        last_batch = Position.from_map({"demo-files": {0: FILES - 1}})
        assert {r.position for r in counts.partition_results.values()} == {last_batch}
        windows = app.query(
            StateQueryRequest.in_store("words-per-minute").with_query(
                WindowRangeQuery.with_window_start_range(0, 2**62)
            )
        )
        per_minute = {
            (w.key, w.start_ms): v for r in windows.partition_results.values() for w, v in r.result
        }
        assert per_minute == dict(minutes)
        assert {r.position for r in windows.partition_results.values()} == {last_batch}
