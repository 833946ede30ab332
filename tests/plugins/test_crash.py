"""SIGKILL at random moments: each engine reopens with exactly one committed batch.

A child process commits batches into a store (every key gets the batch number, the position
and the changelog offset move to it) and is killed at a random moment, often inside a
commit. After each kill the store must hold data, offsets and position of one and the same
committed batch, never a mix. Set IQSTATE_CRASH_ITERATIONS for the long mode (200).
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

from iqstate import Position, TopicPartition
from iqstate.testing import make_context

ENGINES = {
    "rocksdb": "iqstate_rocksdb:RocksDBKeyValueStore",
    "lmdb": "iqstate_lmdb:LMDBKeyValueStore",
}
KEYS = 200
TP = TopicPartition("crash-changelog", 0)

CHILD = """
import importlib, sys
from pathlib import Path
from iqstate import Position, TopicPartition
from iqstate.testing import make_context
module, _, name = {target!r}.partition(":")
store = getattr(importlib.import_module(module), name)("s")
store.init(make_context(Path({root!r}), "s", processing_guarantee="at_least_once"))
start = (store.committed_offset(TopicPartition("crash-changelog", 0)) or 0) + 1
for number in range(start, start + 100000):
    value = str(number).encode()
    store.put_all([(b"key-%05d" % i, value) for i in range({keys})])
    store.update_position(Position.from_map({{"src": {{0: number}}}}))
    store.commit({{TopicPartition("crash-changelog", 0): number}})
    print(number, flush=True)
"""


def iterations() -> int:
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "8"))


def reopen(target: str, root: Path):  # type: ignore[no-untyped-def]
    module, _, name = target.partition(":")
    store_class = getattr(__import__(module), name)
    store = store_class("s")
    store.init(make_context(root, "s", processing_guarantee="at_least_once"))
    return store


@pytest.mark.iqstate_slow
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sigkill_leaves_exactly_one_committed_batch(tmp_path: Path, engine: str) -> None:
    rng = random.Random(f"crash-{engine}")
    target = ENGINES[engine]
    last_committed = 0
    for _ in range(iterations()):
        script = CHILD.format(target=target, root=str(tmp_path), keys=KEYS)
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        first = int(child.stdout.readline())
        assert first == last_committed + 1, "the child resumes after the last committed batch"
        reported = first
        for _ in range(rng.randint(0, 20)):
            reported = int(child.stdout.readline() or reported)
        time.sleep(rng.random() * 0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

        store = reopen(target, tmp_path)
        try:
            committed = store.committed_offset(TP)
            assert committed is not None and committed >= reported
            values = {value for _, value in store.all()}
            assert values == {str(committed).encode()}, f"a mix of batches: {sorted(values)[:5]}"
            assert store.approximate_num_entries() >= KEYS
            assert store.position == Position.from_map({"src": {0: committed}})
            last_committed = committed
        finally:
            store.close()
