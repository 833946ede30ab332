"""100-key `RangeQuery` and LMDB `KeyQuery` through `app.query` against the raw engines.

One store partition per engine (memory, RocksDB, LMDB), N keys of 16 bytes with 100-byte
values, `Serdes.bytes()` both sides, so only the query path differs from the baseline.
Baselines, in the same process and interleaved with the iqstate runs (best of each):

* memory: a `SortedDict` of the same bytes, `irange` and a list of the 100 pairs;
* RocksDB: rocksdict `items(from_key=...)`, the first 100 pairs, on a database opened
  with iqstate's own options (the data path, not the options, is what this measures);
* LMDB: a cursor's `set_range` and the first 100 pairs of `iternext()` in a new read
  transaction; and, for `KeyQuery`, a `get` on a read transaction kept open. Beside it,
  the floor of any answer written in Python: the key read from the same request objects
  iqstate answers (as any answer must), that `get` on the values as iqstate seals them,
  the checksum check (`iqstate.sealing.unseal`) and the IQv2 result objects a caller
  reads (`StateQueryResult`, `QueryResult`, `only_partition_result()`), built the cheapest
  way, as iqstate builds them (`success_of`, `partition_results_of`: no `__init__`), with
  no dispatch, lock or role check at all. Issue 27 set its target against the same floor
  with the objects built through their public `__init__` (0.13-0.25 us slower a lookup), which
  is printed beside it. And the essential work of any served lookup: the request's
  key, that `get`, `unseal`, the two locks a served read takes (the hosted partition's,
  and the store's reused read transaction's) and a dict holding a `(value, position)`
  tuple in place of the result objects; code compiled end to end would save only the
  calls' overhead on top of it.

    python bench/range_path.py [--keys 300000] [--repeat 5] [--engines memory rocksdb lmdb]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sortedcontainers import SortedDict
from timing import calibration_line, timed

from iqstate import (
    Application,
    KeyQuery,
    QueryResult,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
)
from iqstate.results import partition_results_of, success_of
from iqstate.sealing import seal, unseal

BATCH = 10_000
RANGES = 2_000
LOOKUPS = 100_000
SLICES = 10
"""Each round times every variant on a tenth of the requests, the variants interleaved: on
a shared machine the best of many short rounds is steadier than the best of a few long."""


def interleaved_best(
    operations: tuple[Callable[[slice], None], ...], count: int, repeat: int
) -> list[float]:
    """Each operation's best time over `repeat * SLICES` interleaved rounds, each round on
    one slice of the `count` items, scaled to all `count` of them."""
    size = count // SLICES
    rounds = []
    for number in range(repeat * SLICES):
        start = number % SLICES * size
        part = slice(start, start + size)
        rounds.append([timed(functools.partial(op, part)) for op in operations])
    return [min(times) * SLICES for times in zip(*rounds, strict=True)]


class RawMemory:
    def __init__(self, path: Path) -> None:
        self.data: SortedDict = SortedDict()

    def write(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.data.update(pairs)

    def range100(self, lower: bytes, upper: bytes) -> list[tuple[bytes, bytes]]:
        data = self.data
        return [(key, data[key]) for key in data.irange(lower, upper)]

    def close(self) -> None:
        self.data.clear()


class RawRocksDB:
    def __init__(self, path: Path) -> None:
        from iqstate_rocksdb.options import RocksDBSettings
        from rocksdict import Options, Rdict, WriteBatch

        self._batch = WriteBatch
        self.db = Rdict(
            str(path),
            options=RocksDBSettings().db_options(create=True),
            column_families={"offsets": Options(raw_mode=True)},
        )

    def write(self, pairs: list[tuple[bytes, bytes]]) -> None:
        batch = self._batch(raw_mode=True)
        for key, value in pairs:
            batch.put(key, value)
        self.db.write(batch)

    def range100(self, lower: bytes, upper: bytes) -> list[tuple[bytes, bytes]]:
        return list(itertools.islice(self.db.items(from_key=lower), 100))

    def close(self) -> None:
        self.db.close()


class RawLMDB:
    def __init__(self, path: Path) -> None:
        import lmdb

        path.mkdir(parents=True)
        self.env = lmdb.open(str(path), map_size=4 << 30, max_dbs=2, sync=False, metasync=False)
        self.data = self.env.open_db(b"data")
        self.sealed = self.env.open_db(b"sealed")
        self.readers: list[Any] = []

    def write(self, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True) as txn:
            for key, value in pairs:
                txn.put(key, value, db=self.data)
                txn.put(key, seal(key, value), db=self.sealed)

    def range100(self, lower: bytes, upper: bytes) -> list[tuple[bytes, bytes]]:
        with self.env.begin(db=self.data) as txn:
            cursor = txn.cursor()
            cursor.set_range(lower)
            return list(itertools.islice(cursor.iternext(), 100))

    def open_reader(self, sealed: bool = False) -> Callable[[bytes], Any]:
        """`get` on one read transaction kept open (the floor of a key lookup), on the
        values as stored or as iqstate seals them."""
        reader = self.env.begin(db=self.sealed if sealed else self.data)
        self.readers.append(reader)
        return reader.get  # type: ignore[no-any-return]

    def close(self) -> None:
        for reader in self.readers:
            reader.abort()
        self.env.close()


RAW = {"memory": RawMemory, "rocksdb": RawRocksDB, "lmdb": RawLMDB}


def bench_engine(
    engine: str, keys: list[bytes], value: bytes, rng: random.Random, repeat: int
) -> None:
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-range-{engine}-"))
    try:
        raw = RAW[engine](root / "raw")
        app = Application("bench", root / "app")
        config = {} if engine == "memory" else {"sync_commits": False}
        app.key_value_store(
            "s", 1, engine=engine, key_serde="bytes", value_serde="bytes", config=config
        )
        app.start()
        for number, start in enumerate(range(0, len(keys), BATCH)):
            pairs = [(key, value) for key in keys[start : start + BATCH]]
            raw.write(pairs)
            with app.begin_batch(position={"src": {0: number}}, batch_id=number) as writes:
                writes.put_all("s", pairs)

        ordered = sorted(keys)
        positions = [rng.randrange(0, len(ordered) - 100) for _ in range(RANGES)]
        bounds = [(ordered[i], ordered[i + 99]) for i in positions]
        requests = [
            StateQueryRequest.in_store("s").with_query(RangeQuery.with_range(lower, upper))
            for lower, upper in bounds
        ]
        with app.query(requests[0]).partition_results[0].result as first:
            assert list(first) == raw.range100(*bounds[0])

        def raw_ranges(part: slice) -> None:
            for lower, upper in bounds[part]:
                raw.range100(lower, upper)

        def app_ranges(part: slice) -> None:
            query = app.query
            for request in requests[part]:
                with query(request).partition_results[0].result as pairs:
                    list(pairs)

        raw_s, app_s = interleaved_best((raw_ranges, app_ranges), RANGES, repeat)
        print(
            f"\n{engine}: {len(keys):,} keys, best of {repeat * SLICES} interleaved rounds of "
            "a tenth each"
        )
        print(
            f"  RangeQuery (100 keys)   iqstate {app_s / RANGES * 1e6:>8.2f} us   raw "
            f"{raw_s / RANGES * 1e6:>8.2f} us   ratio {app_s / raw_s:.2f}x"
        )
        if isinstance(raw, RawLMDB):
            lookups = [rng.choice(keys) for _ in range(LOOKUPS)]
            key_requests = [
                StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(k)) for k in lookups
            ]
            get, get_sealed = raw.open_reader(), raw.open_reader(sealed=True)
            position = app.query(key_requests[0]).position

            def raw_gets(part: slice) -> None:
                for key in lookups[part]:
                    get(key)

            def python_floor(part: slice) -> None:
                for request in key_requests[part]:
                    key = request.query.key  # what any answer must read first
                    value = unseal(key, get_sealed(key))
                    partition_results_of({0: success_of(value, position)}).only_partition_result()

            def floor_through_init(part: slice) -> None:
                for request in key_requests[part]:
                    key = request.query.key
                    value = unseal(key, get_sealed(key))
                    StateQueryResult({0: QueryResult(value, position)}).only_partition_result()

            partition_lock, reader_lock = threading.Lock(), threading.Lock()

            def essential_work(part: slice) -> None:
                enter, leave = partition_lock.acquire, partition_lock.release
                enter_reader, leave_reader = reader_lock.acquire, reader_lock.release
                for request in key_requests[part]:
                    key = request.query.key
                    enter()
                    enter_reader(False)
                    value = unseal(key, get_sealed(key))
                    leave_reader()
                    leave()
                    {0: (value, position)}  # noqa: B018 - the smallest result a caller could read

            def app_gets(part: slice) -> None:
                query = app.query
                for request in key_requests[part]:
                    query(request).only_partition_result()

            raw_s, app_s, floor_s, init_floor_s, essential_s = interleaved_best(
                (raw_gets, app_gets, python_floor, floor_through_init, essential_work),
                LOOKUPS,
                repeat,
            )
            print(
                f"  KeyQuery                iqstate {app_s / LOOKUPS * 1e6:>8.2f} us   raw "
                f"{raw_s / LOOKUPS * 1e6:>8.2f} us   ratio {app_s / raw_s:.2f}x "
                "(raw: get on an open read transaction)"
            )
            print(
                f"  KeyQuery Python floor           {floor_s / LOOKUPS * 1e6:>8.2f} us"
                f"                   ratio {floor_s / raw_s:.2f}x "
                "(the request's key, get, unseal, IQv2 result objects; nothing else)"
            )
            print(
                f"  KeyQuery floor, __init__        {init_floor_s / LOOKUPS * 1e6:>8.2f} us"
                f"                   ratio {init_floor_s / raw_s:.2f}x "
                "(the same, the result objects built through __init__: issue 27's floor)"
            )
            print(
                f"  KeyQuery essential work         {essential_s / LOOKUPS * 1e6:>8.2f} us"
                f"                   ratio {essential_s / raw_s:.2f}x "
                "(the request's key, get, unseal, two locks, a dict of a tuple)"
            )
            print(
                f"  KeyQuery iqstate / Python floor {app_s / floor_s:.2f}x; "
                f"/ issue 27's floor {app_s / init_floor_s:.2f}x"
            )
        app.close()
        raw.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engines", nargs="*", default=["memory", "rocksdb", "lmdb"])
    args = parser.parse_args()
    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(args.keys)]
    value = rng.randbytes(100)
    print(calibration_line())
    print("the machine may be shared: compare ratios, not absolute times")
    for engine in args.engines:
        bench_engine(engine, keys, value, rng, args.repeat)


if __name__ == "__main__":
    main()
