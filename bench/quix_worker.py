"""Quix Streams' state store, driven by `bench/engines.py` in its own virtual environment.

Quix Streams pins confluent-kafka below the version iqstate uses, so it runs in a separate
venv (created by `bench/engines.py --quix-venv DIR` if missing) and process. The parent
writes the data set (pickled `(key bytes, JSON value bytes)` pairs and the lookup keys) to
a file and sends commands on stdin, one per line, each answered on stdout with the seconds
it took, so the parent alternates Quix's rounds with iqstate's:

* `ingest`: every pair through Quix's write path, batches of 10,000: one
  `RocksDBStorePartition.begin()` transaction per batch, `tx.set(key, value, prefix=b"")`
  per record (the value serialized by Quix's JSON `dumps`), `tx.prepare()`,
  `tx.flush(changelog_offset=n)` (one `WriteBatch` with the offset, as at a checkpoint);
* `gets`: every lookup key through Quix's read path, `tx.get(key, prefix=b"")` on an open
  transaction (the update cache, then RocksDB, then Quix's JSON `loads`), as
  `State.get` in a processing callback does;
* `quit`.

Quix's default `RocksDBOptions` throughout (a 1 GiB block cache shared by the process,
index and filters outside it, LZ4), and its default `use_fsync=True`, which only matters
when the WAL is synced: Quix does not sync the WAL at each write (like the bench's
iqstate stores, `sync_commits=False`).

    python bench/quix_worker.py DATA_FILE DB_DIR
"""

from __future__ import annotations

import gc
import json
import pickle
import sys
import time
from typing import Any

from quixstreams.state.rocksdb import RocksDBOptions, RocksDBStorePartition

BATCH = 10_000


def main() -> None:
    data_file, db_dir = sys.argv[1], sys.argv[2]
    with open(data_file, "rb") as handle:
        pairs, lookups = pickle.load(handle)
    partition = RocksDBStorePartition(db_dir, RocksDBOptions())
    offset = 0
    for command in sys.stdin:
        command = command.strip()
        gc.collect()
        gc.disable()  # as `timing.timed` does for the other side
        if command == "ingest":
            seconds = 0.0
            for first in range(0, len(pairs), BATCH):
                # The values as the pipeline hands them over: decoded before the clock runs.
                batch: list[tuple[bytes, Any]] = [
                    (key, json.loads(value)) for key, value in pairs[first : first + BATCH]
                ]
                start = time.perf_counter()
                tx = partition.begin()
                for key, value in batch:
                    tx.set(key, value, prefix=b"")
                tx.prepare()
                tx.flush(changelog_offset=offset)
                seconds += time.perf_counter() - start
                offset += 1
        elif command == "gets":
            tx = partition.begin()
            get = tx.get
            start = time.perf_counter()
            for key in lookups:
                get(key, b"")
            seconds = time.perf_counter() - start
            assert get(lookups[0], b"") is not None, "the lookup keys are in the store"
        elif command == "quit":
            break
        else:
            raise SystemExit(f"quix_worker: unknown command {command!r}")
        gc.enable()
        print(seconds, flush=True)
    partition.close()


if __name__ == "__main__":
    main()
