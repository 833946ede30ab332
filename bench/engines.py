"""The engines through iqstate against the best raw configuration and Quix Streams, one run.

Realistic data (`bench/values.py`): 16-character keys with distinct JSON values of about
100 bytes, `json` records (compressible) or `random` strings (not), at each size of
`--keys`. For each engine one store partition through iqstate (`key_serde="string"`,
`value_serde="json"`, the engine's default options, commits not fsynced) against the
engine used directly on the same bytes:

* RocksDB's raw side is the best configuration `bench/rocksdb_options.py` found, the
  physical floor (`FLOOR` there: uncompressed tables read through mmap, index and filters
  held by the table readers), not iqstate's options; LMDB's gets run on an open read
  transaction; the memory engine's raw side is a `SortedDict` of the same bytes;
* Quix Streams' state store on the same data and the same lookups, in its own virtual
  environment and process (`bench/quix_worker.py`; its dependencies clash with ours),
  its rounds alternating with ours.

Measured, as the best of `--repeat` interleaved rounds:

* ingest of the JSON values through `begin_batch` + `put_all` in batches of 10,000
  (shuffled keys) against a raw `WriteBatch` (LMDB: write transaction; memory: dict
  update) of the same pre-serialized bytes with an offset written alongside, each side
  into a fresh store once per round, the two taking turns to go first (a store still
  flushing or compacting slows whatever ingests next), each timed as one loop over all
  batches with the values decoded before the clock runs; Quix: its transaction `set` +
  `prepare` + `flush`, the values decoded before the clock runs;
* `KeyQuery` via `app.query` against a raw get of the bytes and Quix's `tx.get`;
* a 100-key `RangeQuery` against 100 items from the raw iterator;
* for both, also the raw side with its rows decoded (`bytes.decode`, `orjson.loads`),
  what a caller of the raw engine needs to get the values iqstate hands over;
* restart: `Application.start()` plus the first query, with every key committed.

Then durable commits: batches of 100 keys through `begin_batch`, each commit fsynced
(`sync_commits=True`, the default under exactly-once without a changelog) against the
same batches not fsynced, for RocksDB, LMDB and SQLite, as batches/s and their ratio.

    python bench/engines.py [--keys 1000000 5000000] [--kinds json random]
        [--engines rocksdb lmdb memory] [--repeat 3] [--quix-venv DIR | --no-quix]
        [--sync-engines rocksdb lmdb sqlite] [--sync-batches 300] [--dir DIR]

`--quix-venv` (default `~/.cache/iqstate-bench/quix-venv`) is created with quixstreams from
PyPI when it does not exist yet. fsync costs what the disk under `--dir` (default: the
system's temporary directory) makes it cost: a tmpfs makes it free.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rocksdb_options import FLOOR
from rocksdb_options import options as raw_options
from timing import calibration_line, timed
from values import KINDS, encoded, records

from iqstate import Application, KeyQuery, RangeQuery, StateQueryRequest

BATCH = 10_000
LOOKUPS = 100_000
RANGES = 2_000
HERE = Path(__file__).resolve().parent
DEFAULT_QUIX_VENV = Path.home() / ".cache" / "iqstate-bench" / "quix-venv"

Pairs = list[tuple[bytes, bytes]]
loads = orjson.loads


class RawRocksDB:
    """rocksdict at the best configuration found (`rocksdb_options.FLOOR`)."""

    def __init__(self, path: Path) -> None:
        from rocksdict import Options, Rdict, WriteBatch

        self._batch = WriteBatch
        self.db = Rdict(
            str(path),
            options=raw_options(FLOOR, create=True),
            column_families={"offsets": Options(raw_mode=True)},
        )
        self.offsets = self.db.get_column_family_handle("offsets")
        self.get = self.db.get

    def write(self, pairs: Pairs, offset: int) -> None:
        batch = self._batch(raw_mode=True)
        for key, value in pairs:
            batch.put(key, value)
        batch.put(b"src-0", offset.to_bytes(8, "big"), self.offsets)
        self.db.write(batch)

    def range100(self, lower: bytes) -> Pairs:
        return list(itertools.islice(self.db.items(from_key=lower), 100))

    def close(self) -> None:
        self.db.close()


class RawLMDB:
    """py-lmdb; gets and ranges on one open read transaction, begun again after writes."""

    def __init__(self, path: Path) -> None:
        import lmdb

        path.mkdir(parents=True)
        self.env = lmdb.open(str(path), map_size=16 << 30, max_dbs=2, sync=False, metasync=False)
        self.data = self.env.open_db(b"data")
        self.meta = self.env.open_db(b"offsets")
        self._txn = self.env.begin(db=self.data)
        self.get = self._txn.get

    def write(self, pairs: Pairs, offset: int) -> None:
        self._txn.abort()
        with self.env.begin(write=True) as txn:
            for key, value in pairs:
                txn.put(key, value, db=self.data)
            txn.put(b"src-0", offset.to_bytes(8, "big"), db=self.meta)
        self._txn = self.env.begin(db=self.data)
        self.get = self._txn.get

    def range100(self, lower: bytes) -> Pairs:
        cursor = self._txn.cursor()
        cursor.set_range(lower)
        return list(itertools.islice(cursor.iternext(), 100))

    def close(self) -> None:
        self._txn.abort()
        self.env.close()


class RawMemory:
    """The memory engine's structure, a `SortedDict` of bytes, used directly."""

    def __init__(self, path: Path) -> None:
        from sortedcontainers import SortedDict

        self.data: Any = SortedDict()
        self.offsets: dict[bytes, bytes] = {}
        self.get = self.data.get

    def write(self, pairs: Pairs, offset: int) -> None:
        self.data.update(pairs)
        self.offsets[b"src-0"] = offset.to_bytes(8, "big")

    def range100(self, lower: bytes) -> Pairs:
        data = self.data
        return [(key, data[key]) for key in itertools.islice(data.irange(lower), 100)]

    def close(self) -> None:
        self.data.clear()


RAW: dict[str, Callable[[Path], Any]] = {
    "rocksdb": RawRocksDB,
    "lmdb": RawLMDB,
    "memory": RawMemory,
}
RAW_LABELS = {
    "rocksdb": ("WriteBatch", "best raw get", "raw iterator"),
    "lmdb": ("write txn", "get, open txn", "cursor"),
    "memory": ("dict update", "SortedDict.get", "irange"),
}


class Quix:
    """Quix Streams' store in `bench/quix_worker.py`, one command at a time."""

    def __init__(self, python: Path, pairs: Pairs, lookups: list[bytes], root: Path) -> None:
        data = root / "quix-data.pickle"
        with data.open("wb") as handle:
            pickle.dump((pairs, lookups), handle, protocol=pickle.HIGHEST_PROTOCOL)
        worker = [str(HERE / "quix_worker.py"), str(data), str(root / "quix")]
        self._process = subprocess.Popen(
            [str(python), "-W", "ignore", *worker],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def run(self, command: str) -> float:
        """Seconds the worker took for `command`."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise RuntimeError(f"bench/quix_worker.py ended (exit {self._process.wait()})")
        return float(answer)

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.write("quit\n")
            self._process.stdin.close()
            self._process.wait(timeout=60)


def quix_python(venv: Path) -> Path:
    """The Python of a virtual environment with quixstreams, created on first use."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with quixstreams from PyPI", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "quixstreams"], check=True)
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('quixstreams'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    print(f"quixstreams {version} in {venv}")
    return python


def open_app(
    directory: Path, engine: str, value_serde: str = "json", **config: object
) -> Application:
    app = Application("bench", directory)
    app.key_value_store(
        "s", 1, engine=engine, key_serde="string", value_serde=value_serde, config=config
    )
    app.start()
    return app


def raw_ingest(raw: Any, batches: list[Pairs]) -> None:
    for number, batch in enumerate(batches):
        raw.write(batch, number)


def decoded_batches(batches: list[Pairs]) -> list[list[tuple[str, Any]]]:
    """Each batch as the pipeline hands it over: keys as `str`, values as JSON objects."""
    return [[(key.decode(), json.loads(value)) for key, value in batch] for batch in batches]


def app_ingest(app: Application, batches: list[list[tuple[str, Any]]]) -> None:
    for number, batch in enumerate(batches):
        with app.begin_batch(position={"src": {0: number}}, batch_id=number) as writes:
            writes.put_all("s", batch)


def bench_engine(
    engine: str,
    pairs: Pairs,
    rng: random.Random,
    repeat: int,
    quix: Path | None,
    base: Path,
) -> None:
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-bench-{engine}-", dir=base))
    try:
        config: dict[str, object] = {} if engine == "memory" else {"sync_commits": False}
        batches = [pairs[i : i + BATCH] for i in range(0, len(pairs), BATCH)]
        lookups = [rng.choice(pairs)[0] for _ in range(LOOKUPS)]
        ordered = sorted(key for key, _ in pairs)
        positions = [rng.randrange(0, len(ordered) - 100) for _ in range(RANGES)]
        starts = [ordered[i] for i in positions]

        # Values decoded before any clock runs; each side's whole ingest then timed as one
        # loop, with the garbage collector paused (`timed`), as the raw side always was.
        decoded = decoded_batches(batches)
        # Ingest into fresh stores, alternated and in turns first, best of each: a store
        # still flushing or compacting in the background slows whichever ingests next.
        raw_ingest_s = ingest_s = float("inf")
        raw: Any = None
        app: Application | None = None
        app_dir = root / "app-0"
        for number in range(repeat):
            if raw is not None and app is not None:
                raw.close()
                app.close()
                shutil.rmtree(root / f"raw-{number - 1}", ignore_errors=True)
                shutil.rmtree(app_dir, ignore_errors=True)
            app_dir = root / f"app-{number}"
            if number % 2:
                app = open_app(app_dir, engine, **config)
                ingest_s = min(ingest_s, timed(functools.partial(app_ingest, app, decoded)))
            raw = RAW[engine](root / f"raw-{number}")
            raw_ingest_s = min(raw_ingest_s, timed(functools.partial(raw_ingest, raw, batches)))
            if not number % 2:
                app = open_app(app_dir, engine, **config)
                ingest_s = min(ingest_s, timed(functools.partial(app_ingest, app, decoded)))
        assert raw is not None and app is not None
        del decoded
        quix_store = Quix(quix, pairs, lookups, root) if quix is not None else None
        quix_ingest_s = quix_store.run("ingest") if quix_store else None

        requests = [
            StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(key.decode()))
            for key in lookups
        ]
        range_requests = [
            StateQueryRequest.in_store("s").with_query(
                RangeQuery.with_range(ordered[i].decode(), ordered[i + 99].decode())
            )
            for i in positions
        ]
        get = raw.get

        def raw_gets() -> None:
            for key in lookups:
                get(key)

        def app_gets() -> None:
            for request in requests:
                app.query(request).only_partition_result()

        def raw_decoded_gets() -> None:
            for key in lookups:
                loads(get(key))

        def raw_ranges() -> None:
            for lower in starts:
                raw.range100(lower)

        def raw_decoded_ranges() -> None:
            for lower in starts:
                [(key.decode(), loads(value)) for key, value in raw.range100(lower)]

        def app_ranges() -> None:
            for request in range_requests:
                with app.query(request).partition_results[0].result as rows:
                    list(rows)

        assert app.query(requests[0]).only_partition_result().result is not None
        raw_gets(), app_gets()  # warm: block cache, page cache, table readers
        # Interleaved rounds, best of each: a busy moment on the machine hits all alike.
        rounds = [
            (
                timed(raw_gets),
                timed(raw_decoded_gets),
                timed(app_gets),
                quix_store.run("gets") if quix_store else 0.0,
                timed(raw_ranges),
                timed(raw_decoded_ranges),
                timed(app_ranges),
            )
            for _ in range(repeat)
        ]
        raw_get_s, decoded_get_s, get_s, quix_get_s, raw_range_s, decoded_range_s, range_s = (
            min(column) for column in zip(*rounds, strict=True)
        )
        if quix_store:
            quix_store.close()
        app.close()
        raw.close()

        restart_s = None
        if engine != "memory":

            def restart() -> None:
                restarted = open_app(app_dir, engine, sync_commits=False)
                result = restarted.query(requests[0])
                assert result.only_partition_result() is not None
                assert result.position.partition_offsets("src")[0] == len(batches) - 1
                restarted.close()

            restart_s = timed(restart)
        n = len(pairs)
        write_label, get_label, range_label = RAW_LABELS[engine]
        ingest_line = (
            f"  ingest, JSON put_all  iqstate {n / ingest_s:>10,.0f} rec/s  "
            f"raw {write_label} {n / raw_ingest_s:>10,.0f} rec/s  "
            f"iqstate/raw {raw_ingest_s / ingest_s:.2f}"
        )
        if quix_ingest_s:
            ingest_line += f"  quix {n / quix_ingest_s:>9,.0f} rec/s"
        print(f"\n{engine}:")
        print(ingest_line)
        get_line = (
            f"  KeyQuery              iqstate {get_s / LOOKUPS * 1e6:>7.2f} us  "
            f"raw {get_label} {raw_get_s / LOOKUPS * 1e6:>6.2f} us  "
            f"iqstate/raw {get_s / raw_get_s:.2f}x  (raw + orjson.loads "
            f"{decoded_get_s / LOOKUPS * 1e6:.2f} us, {get_s / decoded_get_s:.2f}x)"
        )
        if quix_store:
            get_line += (
                f"  quix tx.get {quix_get_s / LOOKUPS * 1e6:>6.2f} us  "
                f"iqstate/quix {get_s / quix_get_s:.2f}x"
            )
        print(get_line)
        print(
            f"  RangeQuery, 100 keys  iqstate {range_s / RANGES * 1e6:>7.2f} us  "
            f"raw {range_label} {raw_range_s / RANGES * 1e6:>6.2f} us  "
            f"iqstate/raw {range_s / raw_range_s:.2f}x  (raw + orjson.loads "
            f"{decoded_range_s / RANGES * 1e6:.2f} us, {range_s / decoded_range_s:.2f}x)"
        )
        if restart_s is not None:
            print(f"  restart + first query {restart_s * 1000:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


SYNC_BATCH = 100
"""Records per batch in the durable-commit comparison: small, so the commit dominates."""


def bench_sync_commits(
    engine: str, value: bytes, rng: random.Random, batches: int, repeat: int, base: Path
) -> None:
    """Batches/s with every commit fsynced against none, interleaved rounds, best of each."""
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-bench-sync-{engine}-", dir=base))
    try:
        apps = {
            sync: open_app(root / str(sync), engine, "bytes", sync_commits=sync)
            for sync in (True, False)
        }
        next_batch = {True: 0, False: 0}

        def ingest(sync: bool) -> None:
            app = apps[sync]
            for _ in range(batches):
                number = next_batch[sync]
                next_batch[sync] += 1
                pairs = [(rng.randbytes(8).hex(), value) for _ in range(SYNC_BATCH)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--engines", nargs="*", default=["rocksdb", "lmdb", "memory"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quix-venv", type=Path, default=DEFAULT_QUIX_VENV)
    parser.add_argument("--no-quix", action="store_true", help="skip Quix Streams")
    parser.add_argument("--sync-engines", nargs="*", default=["rocksdb", "lmdb", "sqlite"])
    parser.add_argument("--sync-batches", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    quix = None if args.no_quix else quix_python(args.quix_venv)
    print(calibration_line())
    for size in args.keys:
        for kind in args.kinds:
            rng = random.Random(size)
            pairs = encoded(records(size, kind, rng))
            print(f"\n=== {size:,} keys, {kind} values, started {time.strftime('%H:%M:%S')}")
            for engine in args.engines:
                bench_engine(
                    engine, pairs, rng, args.repeat, quix if engine == "rocksdb" else None, args.dir
                )
            del pairs
    print(f"\ndurable commits, under {args.dir}:")
    for engine in args.sync_engines:
        bench_sync_commits(
            engine, b"x" * 100, random.Random(7), args.sync_batches, args.repeat, args.dir
        )


if __name__ == "__main__":
    main()
