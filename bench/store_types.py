"""Versioned-store queries through `app.query` against the plain key-value store's.

For each engine, two stores of the same N string keys over 4 partitions with ~100-byte
string values (`value_serde="string"`, persistent engines with `sync_commits=False`):

* a versioned store (`app.versioned_key_value_store`), each key written with `--versions`
  versions at increasing timestamps (`batch.put(..., timestamp=ms)`, a few thousand keys
  per batch); the store keeps each key's current version in one key space and the older
  versions in another, in one key-value store of the engine;
* a plain key-value store (`app.key_value_store`) holding each key's current value.

Measured, in alternating rounds, best of `--repeat`, ratios against the plain store's
query in the same process:

1. `VersionedKeyQuery.with_key(k).as_of(ts)`, `ts` in the middle of the key's history (the
   answer is an older version, read from the history) against `KeyQuery.with_key(k)` on
   the plain store (target <= 2x); and the current version, `VersionedKeyQuery.with_key(k)`;
2. `MultiVersionedKeyQuery.with_key(k)`, every version of the key, read to the end;
3. `VersionedRangeQuery.with_range(lo, hi).as_of(ts)` of 100 keys against a 100-key
   `RangeQuery.with_range(lo, hi)` on the plain store, both asking the one partition that
   holds the keys (`with_partitions({p})`) and reading the whole iterator (target <= 2x).

    python bench/store_types.py [--keys 100000] [--versions 10] [--lookups 50000]
        [--repeat 5] [--engines memory rocksdb lmdb sqlite]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timing import calibration_line, timed

from iqstate import (
    Application,
    KeyQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    StateQueryRequest,
    VersionedKeyQuery,
    VersionedRangeQuery,
)
from iqstate.runtime import partition_for_bytes

PARTITIONS = 4
BATCH_KEYS = 2_000
RANGE_KEYS = 100
BASE_MS = 1_700_000_000_000
STEP_MS = 1_000
KEY_TARGET = 2.0
RANGE_TARGET = 2.0


def value_of(key: str, version: int) -> str:
    """A ~100-character value, distinct for each version of each key."""
    head = f"{key}|v{version:03d}|"
    return head + "x" * (100 - len(head))


def timestamp_of(version: int) -> int:
    return BASE_MS + version * STEP_MS


def load(app: Application, keys: list[str], versions: int) -> None:
    """Every version of each key into "versioned", the current value into "plain"."""
    last = versions - 1
    for number, start in enumerate(range(0, len(keys), BATCH_KEYS)):
        chunk = keys[start : start + BATCH_KEYS]
        with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
            put = batch.put
            for key in chunk:
                for version in range(versions):
                    put("versioned", key, value_of(key, version), timestamp=timestamp_of(version))
            batch.put_all("plain", [(key, value_of(key, last)) for key in chunk])


def verdict(ratio: float, target: float) -> str:
    return f"target <= {target:g}x: {'met' if ratio <= target else 'NOT MET'}"


def bench_engine(
    engine: str, keys: list[str], args: argparse.Namespace, rng: random.Random
) -> dict[str, float]:
    versions = args.versions
    root = Path(tempfile.mkdtemp(prefix=f"iqstate-types-{engine}-"))
    try:
        app = Application("bench", root / "app")
        config = {} if engine == "memory" else {"sync_commits": False}
        retention = versions * STEP_MS * 10  # every version stays in the history
        app.versioned_key_value_store(
            "versioned", PARTITIONS, history_retention_ms=retention, engine=engine,
            value_serde="string", config=config,
        )  # fmt: skip
        app.key_value_store("plain", PARTITIONS, engine=engine, value_serde="string", config=config)
        app.start()
        load_s = timed(lambda: load(app, keys, versions))

        # The version valid at `as_of` is an older one (for 10 versions, the sixth), so the
        # lookup reads the history, not only the current version.
        middle = versions // 2 if versions > 1 else 0
        as_of = timestamp_of(middle) + STEP_MS // 2

        lookups = [rng.choice(keys) for _ in range(args.lookups)]
        multis = lookups[: max(1, args.lookups // 5)]
        by_partition: list[list[str]] = [[] for _ in range(PARTITIONS)]
        for key in keys:
            by_partition[partition_for_bytes(key.encode(), PARTITIONS)].append(key)
        for partition_keys in by_partition:
            partition_keys.sort()
        ranges = []
        for _ in range(max(1, args.lookups // 50)):
            partition = rng.randrange(PARTITIONS)
            ordered = by_partition[partition]
            start = rng.randrange(0, len(ordered) - RANGE_KEYS + 1)
            ranges.append((partition, ordered[start], ordered[start + RANGE_KEYS - 1]))

        plain = StateQueryRequest.in_store("plain")
        versioned = StateQueryRequest.in_store("versioned")
        key_requests: list[Any] = [plain.with_query(KeyQuery.with_key(k)) for k in lookups]
        current_requests: list[Any] = [
            versioned.with_query(VersionedKeyQuery.with_key(k)) for k in lookups
        ]
        as_of_requests: list[Any] = [
            versioned.with_query(VersionedKeyQuery.with_key(k).as_of(as_of)) for k in lookups
        ]
        multi_requests: list[Any] = [
            versioned.with_query(MultiVersionedKeyQuery.with_key(k)) for k in multis
        ]
        range_requests: list[tuple[int, Any]] = [
            (p, plain.with_query(RangeQuery.with_range(lo, hi)).with_partitions({p}))
            for p, lo, hi in ranges
        ]
        versioned_range_requests: list[tuple[int, Any]] = [
            (
                p,
                versioned.with_query(VersionedRangeQuery.with_range(lo, hi).as_of(as_of))
                .with_partitions({p}),
            )
            for p, lo, hi in ranges
        ]  # fmt: skip

        # The answers are the ones expected (not timed).
        def answer(request: Any, partition: int | None = None) -> Any:
            result = app.query(request)
            if partition is None:
                return result.only_partition_result().result  # type: ignore[union-attr]
            return result.partition_results[partition].result

        key = lookups[0]
        assert answer(key_requests[0]) == value_of(key, versions - 1)
        record = answer(as_of_requests[0])
        assert (record.value, record.timestamp) == (value_of(key, middle), timestamp_of(middle))
        record = answer(current_requests[0])
        assert record.value == value_of(key, versions - 1) and record.valid_to is None
        with answer(multi_requests[0]) as found:
            assert [r.value for r in found] == [value_of(key, v) for v in reversed(range(versions))]
        with answer(range_requests[0][1], range_requests[0][0]) as pairs:
            assert len(list(pairs)) == RANGE_KEYS
        with answer(versioned_range_requests[0][1], versioned_range_requests[0][0]) as pairs:
            rows = list(pairs)
            assert len(rows) == RANGE_KEYS
            assert all(r.value == value_of(k, middle) for k, r in rows)

        def keyed(requests: list[Any]) -> Callable[[], None]:
            def run() -> None:
                query = app.query
                for request in requests:
                    only: Any = query(request).only_partition_result()
                    _ = only.result

            return run

        def multi() -> None:
            query = app.query
            for request in multi_requests:
                only: Any = query(request).only_partition_result()
                with only.result as found:
                    list(found)

        def ranged(requests: list[tuple[int, Any]]) -> Callable[[], None]:
            def run() -> None:
                query = app.query
                for partition, request in requests:
                    with query(request).partition_results[partition].result as pairs:
                        list(pairs)

            return run

        measures = {
            "key": keyed(key_requests),
            "current": keyed(current_requests),
            "as_of": keyed(as_of_requests),
            "multi": multi,
            "range": ranged(range_requests),
            "versioned_range": ranged(versioned_range_requests),
        }
        rounds = [[timed(run) for run in measures.values()] for _ in range(args.repeat)]
        best = dict(zip(measures, (min(c) for c in zip(*rounds, strict=True)), strict=True))
        app.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    us = {
        "key": best["key"] / len(key_requests) * 1e6,
        "current": best["current"] / len(current_requests) * 1e6,
        "as_of": best["as_of"] / len(as_of_requests) * 1e6,
        "multi": best["multi"] / len(multi_requests) * 1e6,
        "range": best["range"] / len(range_requests) * 1e6,
        "versioned_range": best["versioned_range"] / len(versioned_range_requests) * 1e6,
    }
    as_of_ratio = us["as_of"] / us["key"]
    range_ratio = us["versioned_range"] / us["range"]
    print(
        f"\n{engine}: {len(keys):,} keys x {versions} versions, {PARTITIONS} partitions, "
        f"loaded in {load_s:.1f} s; best of {args.repeat} alternating rounds"
    )
    print(f"  KeyQuery, plain store                      {us['key']:>9.2f} us")
    print(
        f"  VersionedKeyQuery, current version         {us['current']:>9.2f} us   "
        f"ratio {us['current'] / us['key']:.2f}x the KeyQuery"
    )
    print(
        f"  VersionedKeyQuery.as_of, in the history    {us['as_of']:>9.2f} us   "
        f"ratio {as_of_ratio:.2f}x the KeyQuery   {verdict(as_of_ratio, KEY_TARGET)}"
    )
    print(
        f"  MultiVersionedKeyQuery, {versions} versions        {us['multi']:>9.2f} us   "
        f"{us['multi'] / versions:.2f} us per version   "
        f"ratio {us['multi'] / us['key']:.2f}x the KeyQuery"
    )
    print(f"  RangeQuery, {RANGE_KEYS} keys, one partition       {us['range']:>9.2f} us")
    print(
        f"  VersionedRangeQuery.as_of, {RANGE_KEYS} keys       {us['versioned_range']:>9.2f} us   "
        f"ratio {range_ratio:.2f}x the RangeQuery   {verdict(range_ratio, RANGE_TARGET)}"
    )
    return us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--lookups", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engines", nargs="*", default=["memory", "rocksdb", "lmdb", "sqlite"])
    args = parser.parse_args()
    if args.versions < 2 or args.keys < RANGE_KEYS * PARTITIONS * 2:
        parser.error(f"needs --versions >= 2 and --keys >= {RANGE_KEYS * PARTITIONS * 2}")
    rng = random.Random(13)
    keys = [f"key-{i:09d}" for i in range(args.keys)]
    rng.shuffle(keys)
    print(calibration_line())
    print("the machine may be shared: compare ratios, not absolute times")
    results = {engine: bench_engine(engine, keys, args, rng) for engine in args.engines}

    print(f"\nsummary (us per query; as_of / KeyQuery, {RANGE_KEYS}-key range as_of / RangeQuery)")
    print(
        f"{'engine':<9}{'KeyQuery':>10}{'current':>9}{'as_of':>9}{'ratio':>7}"
        f"{'multi':>9}{'range':>9}{'v.range':>10}{'ratio':>7}"
    )
    for engine, us in results.items():
        print(
            f"{engine:<9}{us['key']:>10.2f}{us['current']:>9.2f}{us['as_of']:>9.2f}"
            f"{us['as_of'] / us['key']:>6.2f}x{us['multi']:>9.2f}{us['range']:>9.2f}"
            f"{us['versioned_range']:>10.2f}{us['versioned_range'] / us['range']:>6.2f}x"
        )
    print(calibration_line())


if __name__ == "__main__":
    main()
