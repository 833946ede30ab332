"""Batches of window, session and versioned puts whose times advance, against the same
records into a plain key-value store.

A store with a retention drops what falls out of it as its stream time advances. Each
drop scans an index, and until 2026-11-29 every put that advanced the stream time ran one:
in a batch (writes pending until its commit), each scan also went through the batch's
writes so far, so a batch of puts at rising times cost time quadratic in its size (50,000
puts in batches of 10,000 took 70-97 s on RocksDB). The stores now drop once per
`put_all`, as a batch and a changelog unit apply them.

For each engine and store type: `--records` puts in batches of `--batch`, keys cycling
over `--keys`, times rising by 10 ms a record, a retention of 1 s (most records expire
within their batch); a fresh application each round, best of `--repeat`, records/s and
the ratio against the key-value store's.

    python bench/time_ordered_writes.py [--records 50000] [--batch 10000] [--keys 20000]
        [--repeat 3] [--engines rocksdb lmdb sqlite memory]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from timing import calibration_line, timed

from iqstate import Application

RETENTION_MS = 1_000
STEP_MS = 10
VALUE = "x" * 50


def declare(app: Application, kind: str, engine: str) -> None:
    options: dict[str, Any] = {"engine": engine, "key_serde": "string", "value_serde": "string"}
    if engine != "memory":
        options["config"] = {"sync_commits": False}
    if kind == "window":
        app.window_store("s", 1, window_size_ms=100, retention_ms=RETENTION_MS, **options)
    elif kind == "session":
        app.session_store("s", 1, RETENTION_MS, **options)
    elif kind == "versioned":
        app.versioned_key_value_store("s", 1, RETENTION_MS, **options)
    else:
        app.key_value_store("s", 1, **options)


def write(app: Application, kind: str, records: int, batch_size: int, keys: int) -> None:
    for first in range(0, records, batch_size):
        number = first // batch_size + 1
        with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
            for n in range(first, min(first + batch_size, records)):
                key, at = f"k{n % keys}", n * STEP_MS
                if kind == "window":
                    batch.put("s", key, VALUE, window_start=at)
                elif kind == "session":
                    batch.put("s", key, VALUE, session=(at, at + 5))
                elif kind == "versioned":
                    batch.put("s", key, VALUE, timestamp=at)
                else:
                    batch.put("s", key, VALUE)


def seconds_of_one_round(engine: str, kind: str, args: argparse.Namespace) -> float:
    directory = Path(tempfile.mkdtemp(prefix="iqstate-bench-"))
    try:
        app = Application("bench", directory)
        declare(app, kind, engine)
        with app:
            return timed(lambda: write(app, kind, args.records, args.batch, args.keys))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def best_seconds(engine: str, kind: str, args: argparse.Namespace) -> float:
    return min(seconds_of_one_round(engine, kind, args) for _ in range(args.repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=["rocksdb", "lmdb", "sqlite", "memory"])
    args = parser.parse_args()
    print(calibration_line())
    for engine in args.engines:
        plain = best_seconds(engine, "key_value", args)
        print(f"{engine}: key-value {args.records / plain:>9,.0f} records/s")
        for kind in ("window", "session", "versioned"):
            seconds = best_seconds(engine, kind, args)
            print(
                f"{engine}: {kind:<9} {args.records / seconds:>9,.0f} records/s, "
                f"{seconds / plain:.2f}x the key-value store's time"
            )


if __name__ == "__main__":
    main()
