"""The persistent engines under an Application: restart, fences, windows, crashed stores."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iqstate import (
    Application,
    KeyQuery,
    Position,
    StateQueryRequest,
    WindowKeyQuery,
)

ENGINES = ["rocksdb", "lmdb"]


def open_app(state_dir: Path, engine: str, guarantee: str = "exactly_once") -> Application:
    app = Application("app", state_dir, processing_guarantee=guarantee)  # type: ignore[arg-type]
    app.key_value_store("counts", 3, engine=engine, value_serde="int64")
    app.window_store("per-minute", 2, 60_000, 3_600_000, engine=engine, value_serde="int64")
    app.start()
    return app


def lookup(app: Application, key: str) -> tuple[object, Position]:
    result = app.query(StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key)))
    only = result.only_partition_result()
    return (only.result if only else None), result.position


@pytest.mark.parametrize("engine", ENGINES)
def test_restart_serves_committed_state_without_replay(tmp_path: Path, engine: str) -> None:
    app = open_app(tmp_path, engine)
    with app.begin_batch(position={"words": {0: 10}}, batch_id=1) as batch:
        batch.put_all("counts", [(f"w{i}", i) for i in range(100)])
        batch.put("per-minute", "w1", 5, window_start=60_000)
    app.close()

    app = open_app(tmp_path, engine)
    try:
        value, position = lookup(app, "w42")
        assert value == 42 and position == Position.from_map({"words": {0: 10}})
        windows = app.query(
            StateQueryRequest.in_store("per-minute").with_query(
                WindowKeyQuery.with_key_and_window_start_range("w1", 0, 120_000)
            )
        )
        assert [list(r.result) for r in windows.partition_results.values()] == [[(60_000, 5)]]
        with app.begin_batch(position={"words": {0: 10}}, batch_id=1) as replay:
            replay.put("counts", "w42", -1)
        assert len(replay.skipped) == 5
        assert lookup(app, "w42")[0] == 42
    finally:
        app.close()


CRASHING_WRITER = """
import os
from iqstate import Application
app = Application("app", {state!r})
app.key_value_store("counts", 3, engine={engine!r}, value_serde="int64")
app.window_store("per-minute", 2, 60_000, 3_600_000, engine={engine!r}, value_serde="int64")
app.start()
with app.begin_batch(position={{"words": {{0: 1}}}}, batch_id=1) as batch:
    batch.put("counts", "w", 1)
os._exit(0)  # dies without closing: the stores are not marked closed
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_unclean_store_keeps_its_last_commit_under_exactly_once(
    tmp_path: Path, engine: str
) -> None:
    """The built-in engines commit atomically: after a crash they are used as they are."""
    script = textwrap.dedent(CRASHING_WRITER.format(state=str(tmp_path), engine=engine))
    subprocess.run([sys.executable, "-c", script], check=True)
    app = open_app(tmp_path, engine)
    try:
        assert lookup(app, "w") == (1, Position.from_map({"words": {0: 1}}))
        lags = app.all_local_store_partition_lags()
        assert not any(lag.rebuilt for lag in lags["counts"].values())
        with app.begin_batch(position={"words": {0: 1}}, batch_id=1) as replay:
            replay.put("counts", "w", 7)
        assert replay.skipped and not replay.applied, "the fence survived the crash"
        assert lookup(app, "w")[0] == 1
    finally:
        app.close()
