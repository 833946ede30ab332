"""The persistent engines through iqstate against raw rocksdict / lmdb, in the same process.

For each engine, N keys (16-byte keys, 100-byte values, `Serdes.bytes()` both sides) in one
store partition, so iqstate and the raw baseline each use one database; commits are not
fsynced on either side (`sync_commits=False`; the last item measures fsync):

* ingest in shuffled key order, batches of 10,000: `begin_batch` + `batch.put_all` against a
  raw `WriteBatch` / write transaction of the same keys (with an offset written alongside,
  as iqstate does);
* `KeyQuery` through `app.query` against a raw `get`;
* a 100-key `RangeQuery` against a raw 100-key iteration;
* restart: `Application.start()` plus the first query, with N committed keys;
* durable commits: batches of 100 keys through `begin_batch`, each commit fsynced
  (`sync_commits=True`, the default under exactly-once without a changelog) against the
  same batches not fsynced, for RocksDB, LMDB and SQLite, as batches/s and their ratio.

    python bench/engines.py [--keys 1000000] [--engines rocksdb lmdb] [--repeat 3]
        [--sync-engines rocksdb lmdb sqlite] [--sync-batches 300] [--dir DIR]

fsync costs what the disk under `--dir` (default: the system's temporary directory) makes
it cost: a tmpfs makes it free, a laptop SSD costs far less than a network volume.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from timing import calibration_line, timed

from iqstate import Application, KeyQuery, RangeQuery, StateQueryRequest

BATCH = 10_000
LOOKUPS = 100_000
RANGES = 2_000


class RawRocksDB:
    def __init__(self, path: Path) -> None:
        from iqstate_rocksdb.options import RocksDBSettings
        from rocksdict import Options, Rdict, WriteBatch

        settings = RocksDBSettings()
        self._batch = WriteBatch
        self.db = Rdict(
            str(path),
            options=settings.db_options(create=True),
            column_families={"offsets": Options(raw_mode=True)},
        )
        self.offsets = self.db.get_column_family_handle("offsets")

    def write(self, pairs: list[tuple[bytes, bytes]], offset: int) -> None:
        batch = self._batch(raw_mode=True)
        for key, value in pairs:
            batch.put(key, value)
        batch.put(b"src-0", offset.to_bytes(8, "big"), self.offsets)
        self.db.write(batch)

    def get(self, key: bytes) -> Any:
        return self.db.get(key)

    def range100(self, lower: bytes) -> list[tuple[bytes, bytes]]:
        return list(itertools.islice(self.db.items(from_key=lower), 100))

    def close(self) -> None:
        self.db.close()


class RawLMDB:
    def __init__(self, path: Path) -> None:
        import lmdb

        path.mkdir(parents=True)
        self.env = lmdb.open(str(path), map_size=4 << 30, max_dbs=2, sync=False, metasync=False)
        self.data = self.env.open_db(b"data")
        self.meta = self.env.open_db(b"offsets")

    def write(self, pairs: list[tuple[bytes, bytes]], offset: int) -> None:
        with self.env.begin(write=True) as txn:
            for key, value in pairs:
                txn.put(key, value, db=self.data)
            txn.put(b"src-0", offset.to_bytes(8, "big"), db=self.meta)

    def get(self, key: bytes) -> Any:
        with self.env.begin(db=self.data) as txn:
            return txn.get(key)

    def range100(self, lower: bytes) -> list[tuple[bytes, bytes]]:
        with self.env.begin(db=self.data) as txn:
            cursor = txn.cursor()
            cursor.set_range(lower)
            return list(itertools.islice(cursor.iternext(), 100))

    def close(self) -> None:
        self.env.close()


RAW = {"rocksdb": RawRocksDB, "lmdb": RawLMDB}


def open_app(directory: Path, engine: str, **config: object) -> Application:
    app = Application("bench", directory)
    app.key_value_store(
        "s", 1, engine=engine, key_serde="bytes", value_serde="bytes", config=config
    )
    app.start()
    return app


SYNC_BATCH = 100
"""Records per batch in the durable-commit comparison: small, so the commit dominates."""


def bench_sync_commits(
    engine: str, value: bytes, rng: random.Random, batches: int, repeat: int, base: Path
) -> None:
    """Batches/s with every commit fsynced against none, interleaved rounds, best of each."""
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-bench-sync-{engine}-", dir=base))
    try:
        apps = {
            sync: open_app(root / str(sync), engine, sync_commits=sync) for sync in (True, False)
        }
        next_batch = {True: 0, False: 0}

        def ingest(sync: bool) -> None:
            app = apps[sync]
            for _ in range(batches):
                number = next_batch[sync]
                next_batch[sync] += 1
                pairs = [(rng.randbytes(16), value) for _ in range(SYNC_BATCH)]
                with app.begin_batch(position={"src": {0: number}}, batch_id=number) as writes:
                    writes.put_all("s", pairs)

        rounds = [
            (timed(lambda: ingest(True)), timed(lambda: ingest(False))) for _ in range(repeat)
        ]
        synced_s, unsynced_s = (min(c) for c in zip(*rounds, strict=True))
        for app in apps.values():
            app.close()
        synced, unsynced = batches / synced_s, batches / unsynced_s
        print(f"\n{engine}: batches of {SYNC_BATCH} records, {batches} per round, best of {repeat}")
        print(
            f"  commits fsynced {synced:>9,.0f} batches/s ({synced_s / batches * 1000:.2f} ms)   "
            f"not fsynced {unsynced:>9,.0f} batches/s ({unsynced_s / batches * 1000:.2f} ms)   "
            f"fsynced/not {synced / unsynced:.2f}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_engine(
    engine: str, keys: list[bytes], value: bytes, rng: random.Random, repeat: int
) -> None:
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-bench-{engine}-"))
    try:
        raw = RAW[engine](root / "raw")
        app = open_app(root / "app", engine, sync_commits=False)
        batches = [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]

        def raw_ingest() -> None:
            for number, batch in enumerate(batches):
                raw.write(
                    [(key, value) for key, value in zip(batch, itertools.repeat(value))], number
                )

        def iqstate_ingest() -> None:
            for number, batch in enumerate(batches):
                with app.begin_batch(position={"src": {0: number}}, batch_id=number) as writes:
                    writes.put_all("s", zip(batch, itertools.repeat(value)))

        raw_ingest_s = timed(raw_ingest)
        ingest_s = timed(iqstate_ingest)

        lookups = [rng.choice(keys) for _ in range(LOOKUPS)]
        requests = [
            StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(k)) for k in lookups
        ]
        ordered = sorted(keys)
        positions = [rng.randrange(0, len(ordered) - 100) for _ in range(RANGES)]
        starts = [ordered[i] for i in positions]
        range_requests = [
            StateQueryRequest.in_store("s").with_query(
                RangeQuery.with_range(ordered[i], ordered[i + 99])
            )
            for i in positions
        ]

        def raw_gets() -> None:
            for key in lookups:
                raw.get(key)

        def app_gets() -> None:
            for request in requests:
                app.query(request).only_partition_result()

        def raw_ranges() -> None:
            for lower in starts:
                raw.range100(lower)

        def app_ranges() -> None:
            for request in range_requests:
                with app.query(request).partition_results[0].result as pairs:
                    list(pairs)

        # Interleaved rounds, best of each: a busy moment on the machine hits both alike.
        rounds = [
            (timed(raw_gets), timed(app_gets), timed(raw_ranges), timed(app_ranges))
            for _ in range(repeat)
        ]
        raw_get_s, get_s, raw_range_s, range_s = (min(c) for c in zip(*rounds, strict=True))
        app.close()
        raw.close()

        def restart() -> None:
            restarted = open_app(root / "app", engine, sync_commits=False)
            result = restarted.query(requests[0])
            assert result.only_partition_result() is not None
            assert result.position.partition_offsets("src")[0] == len(batches) - 1
            restarted.close()

        restart_s = timed(restart)
        n = len(keys)
        print(f"\n{engine}: {n:,} keys")
        print(
            f"  ingest (shuffled, put_all)  iqstate {n / ingest_s:>10,.0f} rec/s   raw "
            f"{n / raw_ingest_s:>10,.0f} rec/s   iqstate/raw {raw_ingest_s / ingest_s:.2f}"
        )
        print(
            f"  KeyQuery                    iqstate {get_s / LOOKUPS * 1e6:>8.2f} us      raw "
            f"{raw_get_s / LOOKUPS * 1e6:>8.2f} us      ratio {get_s / raw_get_s:.2f}x"
        )
        print(
            f"  RangeQuery (100 keys)       iqstate {range_s / RANGES * 1e6:>8.2f} us      raw "
            f"{raw_range_s / RANGES * 1e6:>8.2f} us      ratio {range_s / raw_range_s:.2f}x"
        )
        print(f"  restart + first query       {restart_s * 1000:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--engines", nargs="*", default=["rocksdb", "lmdb"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sync-engines", nargs="*", default=["rocksdb", "lmdb", "sqlite"])
    parser.add_argument("--sync-batches", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(args.keys)]
    value = rng.randbytes(100)
    print(calibration_line())
    for engine in args.engines:
        bench_engine(engine, keys, value, rng, args.repeat)
    print(f"\ndurable commits, under {args.dir}:")
    for engine in args.sync_engines:
        bench_sync_commits(engine, value, rng, args.sync_batches, args.repeat, args.dir)


if __name__ == "__main__":
    main()
