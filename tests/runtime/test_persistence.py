"""Persistent stores under the runtime: reopen, replay after a crash, legacy offset files."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import snapshot_engine
from support.snapshot_engine import registry_with_snapshot_engines

from iqstate import (
    Application,
    AppState,
    CorruptStateError,
    IncompatibleStateError,
    KeyQuery,
    Position,
    RangeQuery,
    StateQueryRequest,
    StreamsStoppedError,
)
from iqstate.runtime.offsets import CHECKPOINT_FILE, POSITION_FILE, read_offsets_file

PARTITIONS = 3
KEYS = [f"key-{i}" for i in range(12)]
SUPPORT = str(Path(__file__).parent.parent)


def open_app(state_dir: Path, engine: str = "snapshot") -> Application:
    app = Application("app", state_dir, plugins=registry_with_snapshot_engines())
    app.key_value_store("s", PARTITIONS, engine=engine, value_serde="int64")
    app.start()
    return app


def write_batch(app: Application, number: int) -> Any:
    """Batch `number` sets every key to number * 10 + key index, at source offset `number`."""
    with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
        for index, key in enumerate(KEYS):
            batch.put("s", key, number * 10 + index)
    return batch


def contents(app: Application) -> dict[int, tuple[list[tuple[str, int]], Position | None]]:
    result = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
    return {p: (list(r.result), r.position) for p, r in result.partition_results.items()}


def expected_after(number: int) -> dict[str, int]:
    return {key: number * 10 + index for index, key in enumerate(KEYS)}


def flat(app: Application) -> dict[str, int]:
    return {k: v for pairs, _ in contents(app).values() for k, v in pairs}


@pytest.mark.parametrize("engine", ["snapshot", "snapshot-legacy"])
def test_reopen_restores_data_position_and_fence(tmp_path: Path, engine: str) -> None:
    app = open_app(tmp_path, engine)
    for number in (1, 2):
        write_batch(app, number)
    app.close()
    app = open_app(tmp_path, engine)
    try:
        assert flat(app) == expected_after(2)
        assert {pos for _, pos in contents(app).values()} == {Position.from_map({"src": {0: 2}})}
        replay = write_batch(app, 2)
        assert len(replay.skipped) == PARTITIONS and not replay.applied
        assert len(write_batch(app, 3).applied) == PARTITIONS
    finally:
        app.close()


def test_replay_completes_a_batch_a_crash_interrupted(tmp_path: Path) -> None:
    app = open_app(tmp_path)
    write_batch(app, 1)
    snapshot_engine.FAULTS[("s", 1)] = OSError("power cut")
    with pytest.raises(OSError, match="power cut"):
        write_batch(app, 2)
    assert app.state is AppState.ERROR
    with pytest.raises(StreamsStoppedError):
        app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("key-0")))
    app.close()

    app = open_app(tmp_path)
    try:
        positions = {p: pos for p, (_, pos) in contents(app).items()}
        assert positions[0] == Position.from_map({"src": {0: 2}}), "partition 0 committed batch 2"
        assert positions[1] == positions[2] == Position.from_map({"src": {0: 1}})
        replays = [write_batch(app, number) for number in (1, 2)]
        assert len(replays[0].skipped) == PARTITIONS
        assert replays[1].skipped == {("s", 0)} and replays[1].applied == {("s", 1), ("s", 2)}
        assert flat(app) == expected_after(2)
        assert {pos for _, pos in contents(app).values()} == {Position.from_map({"src": {0: 2}})}
    finally:
        app.close()


def test_legacy_store_gets_checkpoint_and_position_files(tmp_path: Path) -> None:
    app = open_app(tmp_path, "snapshot-legacy")
    write_batch(app, 4)
    app.close()
    directory = tmp_path / "app" / "s" / "0"
    offsets = read_offsets_file(directory / CHECKPOINT_FILE)
    assert [(tp.topic, offset) for tp, offset in offsets.items()] == [("__iqstate-batch-fence", 4)]
    assert (directory / POSITION_FILE).read_text().splitlines() == ["0", "1", "src 0 4"]
    assert not any(p.suffix == ".tmp" for p in directory.iterdir()), "no temporary files left"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "0\n2\nsrc 0 4\n",
        "7\n1\nsrc 0 4\n",
        "0\n1\nsrc zero 4\n",
        "0\n1\nsrc 0 -3\n",
        "\xff\xfe",
    ],
)
def test_corrupt_legacy_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    app = open_app(tmp_path, "snapshot-legacy")
    write_batch(app, 1)
    app.close()
    position_file = tmp_path / "app" / "s" / "1" / POSITION_FILE
    position_file.write_text(content, encoding="latin-1")
    with pytest.raises(CorruptStateError, match=r"\.position") as refused:
        open_app(tmp_path, "snapshot-legacy")
    # What it advises keeps the data: the file, not the directory beside it.
    assert "Do not delete the partition's directory" in str(refused.value)
    position_file.unlink()
    app = open_app(tmp_path, "snapshot-legacy")
    app.close()


def test_store_declared_differently_is_refused(tmp_path: Path) -> None:
    with contextlib.closing(open_app(tmp_path)) as first:
        write_batch(first, 1)
    app = Application("app", tmp_path, plugins=registry_with_snapshot_engines())
    app.key_value_store("s", PARTITIONS + 1, engine="snapshot", value_serde="int64")
    with pytest.raises(IncompatibleStateError, match="declared: partitions 3 then, 4 now;"):
        app.start()
    app.close()
    (tmp_path / "app" / "s" / "store.json").write_text("{not json")
    with pytest.raises(CorruptStateError, match="store.json"):
        open_app(tmp_path)
    (tmp_path / "app" / "s" / "store.json").write_bytes(b'{"partitions": 3\xff}')  # not UTF-8
    with pytest.raises(CorruptStateError, match="store.json"):
        open_app(tmp_path)
    (tmp_path / "app" / "s" / "store.json").write_text("[3]")  # JSON, not an object
    with pytest.raises(CorruptStateError, match="needs a JSON object") as damaged:
        open_app(tmp_path)
    # The error gives the declaration to write back; written, the store opens with its data.
    declaration = re.search(r"write (\{.*\}) to it", str(damaged.value))
    assert declaration is not None, damaged.value
    (tmp_path / "app" / "s" / "store.json").write_text(declaration.group(1))
    with contextlib.closing(open_app(tmp_path)) as repaired:
        assert flat(repaired) == expected_after(1)


def test_a_persistent_store_declared_in_memory_later_is_refused_not_ignored(
    tmp_path: Path,
) -> None:
    """Leaving `engine=` out on a restart declares the store in memory: its kept data would
    answer every query as absent. It is refused, and the store as it was still has its data."""

    def declared(**engine: str) -> Application:
        app = Application("app", tmp_path)
        app.key_value_store("s", PARTITIONS, value_serde="int64", **engine)
        return app

    with declared(engine="rocksdb") as first:
        write_batch(first, 1)
    forgetful = declared()
    with pytest.raises(IncompatibleStateError, match="engine 'rocksdb' then, 'memory' now"):
        forgetful.start()
    forgetful.close()
    with declared(engine="rocksdb") as again:
        assert flat(again) == expected_after(1)


WRITER = """
import sys
sys.path.insert(0, {support!r})
from support.snapshot_engine import registry_with_snapshot_engines
from iqstate import Application
app = Application("app", {state!r}, plugins=registry_with_snapshot_engines())
app.key_value_store("s", {partitions}, engine="snapshot", value_serde="int64")
app.start()
keys = {keys!r}
for number in range(1, {batches} + 1):
    with app.begin_batch(position={{"src": {{0: number}}}}, batch_id=number) as batch:
        for index, key in enumerate(keys):
            batch.put("s", key, number * 10 + index)
    print(number, flush=True)
app.close()
"""


def kills() -> int:
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "4"))


@pytest.mark.iqstate_slow
def test_sigkill_then_replay_applies_every_batch_exactly_once(tmp_path: Path) -> None:
    """A writer process is killed at random moments; replaying all batches heals the stores."""
    rng = random.Random(20261122)
    batches = 40
    for iteration in range(kills()):
        state = tmp_path / f"run-{iteration}"
        script = WRITER.format(
            support=SUPPORT, state=str(state), partitions=PARTITIONS, keys=KEYS, batches=batches
        )
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        target = rng.randint(1, batches - 5)
        while int(child.stdout.readline() or batches) < target:
            pass
        time.sleep(rng.random() * 0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

        app = open_app(state)
        try:
            committed = {pos.partition_offsets("src").get(0) for _, pos in contents(app).values()}
            assert len(committed - {None}) <= 2, "partitions are at most one batch apart"
            for number in range(1, batches + 1):
                write_batch(app, number)
            assert flat(app) == expected_after(batches)
            positions = {pos for _, pos in contents(app).values()}
            assert positions == {Position.from_map({"src": {0: batches}})}
        finally:
            app.close()
