"""A persistent store closed by one thread while others read it directly: every read in
progress ends or fails as a read of a closed store, never as damage, and the process lives
(an SQLite connection closed under another thread's statement crashed it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

READERS_AND_A_CLOSE = """
import json, sys, threading, time
from pathlib import Path
from iqstate import ClosedStoreError, TopicPartition
from iqstate.testing import make_context
from iqstate_lmdb import LMDBKeyValueStore
from iqstate_rocksdb import RocksDBKeyValueStore
from iqstate_sqlite import SQLiteKeyValueStore

store_class = {
    "lmdb": LMDBKeyValueStore, "rocksdb": RocksDBKeyValueStore, "sqlite": SQLiteKeyValueStore
}[sys.argv[1]]
root, rounds, reopen = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "reopen"
wrong, closed_errors = [], 0
for round_ in range(rounds):
    store = store_class("s")
    store.init(make_context(root / str(round_), "s"))
    store.put_all((b"k%06d" % i, b"v" * 100) for i in range(5_000))
    store.commit({TopicPartition("t", 0): 1})
    go, done = threading.Event(), threading.Event()

    def read(kind):
        global closed_errors
        go.wait()
        try:
            while not done.is_set():
                if kind == "get":
                    assert store.get(b"k000100") == b"v" * 100
                elif kind == "range":
                    with store.range(b"k000000", b"k004999") as rows:
                        assert sum(1 for _ in rows) == 5_000
                else:
                    assert store.approximate_num_entries() > 0
        except ClosedStoreError:
            closed_errors += 1
        except BaseException as error:
            wrong.append(f"{kind}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=read, args=(kind,)) for kind in ("get", "range", "count")]
    for thread in threads:
        thread.start()
    go.set()
    time.sleep(0.005)
    store.close()
    if reopen:  # the same object opened again under the readers: a new handle
        store.init(make_context(root / str(round_), "s"))
        time.sleep(0.005)
    done.set()
    for thread in threads:
        thread.join()
    if reopen:
        store.close()
    reopened = store_class("s")
    reopened.init(make_context(root / str(round_), "s"))
    assert reopened.get(b"k004999") == b"v" * 100
    reopened.close()
print(json.dumps({"wrong": sorted(set(wrong)), "closed_errors": closed_errors}))
"""


@pytest.mark.parametrize("then", ["close", "reopen"])
@pytest.mark.parametrize("engine", ["lmdb", "rocksdb", "sqlite"])
def test_a_close_under_other_threads_reads_is_a_closed_store_never_damage_or_a_crash(
    engine: str, then: str, tmp_path: Path
) -> None:
    """`reopen`: the store object is opened again at once, while the readers go on."""
    child = subprocess.run(
        [sys.executable, "-c", READERS_AND_A_CLOSE, engine, str(tmp_path), "15", then],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, f"the process died ({child.returncode}): {child.stderr[-2000:]}"
    outcome = json.loads(child.stdout)
    assert outcome["wrong"] == [], "reads of a store closed meanwhile must not look like damage"
    assert outcome["closed_errors"] > 0, "the readers were reading when the store closed"
