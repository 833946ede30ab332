"""Raw rocksdict point reads under several option sets, with RocksDB's own statistics.

Finds the physical floor of a point read on this machine and what iqstate's defaults cost
against it. For each size (`--keys`) and value kind, one database is written per
table-format variant (compression, whole or partitioned filters), flushed and compacted;
then every read variant reopens it and times random gets, with the block cache's
statistics per get (filter, index and data block misses), so the cause of a slow read
shows directly: a filter or index block missed on every get is reread and rechecked on
every get.

    python bench/rocksdb_options.py [--keys 1000000 5000000] [--kinds json random]
        [--variants NAME ...] [--lookups 100000] [--repeat 3] [--dir DIR]

Value kinds: `json`, distinct JSON records of about 100 bytes (they compress to about half
with LZ4); `random`, JSON strings of 96 random base64 characters (LZ4 gains nothing).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
)
from timing import calibration_line, timed
from values import dataset

MB = 1024 * 1024


@dataclass(frozen=True)
class Variant:
    """One option set: how tables are written (`table`) and how they are read."""

    name: str
    table: str = "lz4-full"
    cache_mb: int = 64
    cache_index_and_filter_blocks: bool = True
    pin_l0: bool = False
    pin_top_level: bool = False
    max_open_files: int = 256
    hyper_clock: bool = False
    mmap_reads: bool = False
    note: str = field(default="", compare=False)


TABLES: dict[str, tuple[str, bool]] = {
    # name: (compression, partitioned filters and index)
    "lz4-full": ("lz4", False),
    "none-full": ("none", False),
    "lz4-partitioned": ("lz4", True),
}

VARIANTS = [
    Variant("iqstate-0.1", note="iqstate's defaults before issue 13: 64 MB cache, 64 shards"),
    Variant("readers-128", cache_mb=128, cache_index_and_filter_blocks=False,
            max_open_files=-1, note="index and filters held by the readers, 128 MB cache"),
    Variant("table-readers", cache_index_and_filter_blocks=False, max_open_files=-1,
            note="index and filters held by the open table readers, 64 MB cache for data"),
    Variant("cache-128", cache_mb=128, note="index and filters in a 128 MB cache"),
    Variant("cache-64-pin-l0", pin_l0=True, note="64 MB cache, L0 index and filters pinned"),
    Variant("hyper-clock-64", hyper_clock=True, note="64 MB HyperClockCache"),
    Variant("partitioned-64", table="lz4-partitioned", pin_top_level=True, pin_l0=True,
            note="partitioned index and filters, top levels pinned, 64 MB cache"),
    Variant("table-readers-none", table="none-full", cache_index_and_filter_blocks=False,
            max_open_files=-1, note="as table-readers, tables not compressed"),
    Variant("readers-256", cache_mb=256, cache_index_and_filter_blocks=False,
            note="index and filters held by the table readers, 256 MB cache for data"),
    Variant("readers-512", cache_mb=512, cache_index_and_filter_blocks=False,
            note="index and filters held by the table readers, 512 MB cache for data"),
    Variant("readers-none-256", table="none-full", cache_mb=256,
            cache_index_and_filter_blocks=False, note="as readers-256, tables not compressed"),
    Variant("partitioned-256", table="lz4-partitioned", cache_mb=256, pin_top_level=True,
            pin_l0=True, note="partitioned index and filters, top levels pinned, 256 MB cache"),
    Variant("hyper-clock-256", cache_mb=256, hyper_clock=True, note="256 MB HyperClockCache"),
    Variant("hyper-clock-readers-256", cache_mb=256, hyper_clock=True,
            cache_index_and_filter_blocks=False,
            note="256 MB HyperClockCache for data, index and filters held by the table readers"),
    Variant("mmap-none-256", table="none-full", cache_mb=256, mmap_reads=True,
            cache_index_and_filter_blocks=False,
            note="as readers-none-256, tables read through mmap"),
    Variant("cache-1024", cache_mb=1024, cache_index_and_filter_blocks=False,
            note="a cache larger than the data: every block cached"),
]  # fmt: skip
FLOOR = Variant(
    "floor",
    table="none-full",
    mmap_reads=True,
    cache_mb=2048,
    cache_index_and_filter_blocks=False,
    max_open_files=-1,
    note="the best found: uncompressed tables read through mmap, index and filters held "
    "by the readers (data blocks come from the page cache, without a copy)",
)
"""The physical floor of a point read here, `bench/engines.py`'s raw RocksDB baseline."""
VARIANTS.append(FLOOR)
VARIANTS.append(
    Variant("cache-2048", cache_mb=2048, cache_index_and_filter_blocks=False,
            max_open_files=-1, note="an LRU cache larger than the data, readers hold the rest"),
)  # fmt: skip
VARIANTS.append(
    Variant("floor-hyper-clock", cache_mb=2048, hyper_clock=True,
            cache_index_and_filter_blocks=False, max_open_files=-1,
            note="a HyperClockCache larger than the data, readers hold the rest"),
)  # fmt: skip
VARIANTS.append(
    Variant("iqstate-default", cache_mb=1024, hyper_clock=True,
            cache_index_and_filter_blocks=False,
            note="iqstate's defaults since issue 13 (1 GiB HyperClockCache, readers)"),
)  # fmt: skip
BY_NAME = {variant.name: variant for variant in VARIANTS}


def options(variant: Variant, *, create: bool) -> Options:
    compression, partitioned = TABLES[variant.table]
    opts = Options(raw_mode=True)
    opts.create_if_missing(create)
    opts.create_missing_column_families(create)
    opts.enable_statistics()
    table = BlockBasedOptions()
    capacity = variant.cache_mb * MB
    table.set_block_cache(
        Cache.new_hyper_clock_cache(capacity, 0) if variant.hyper_clock else Cache(capacity)
    )
    table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(variant.cache_index_and_filter_blocks)
    table.set_pin_l0_filter_and_index_blocks_in_cache(variant.pin_l0)
    if partitioned:
        table.set_index_type(BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_pin_top_level_index_and_filter(variant.pin_top_level)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(
        DBCompressionType.lz4() if compression == "lz4" else DBCompressionType.none()
    )
    opts.set_write_buffer_size(16 * MB)
    opts.set_max_open_files(variant.max_open_files)
    opts.set_allow_mmap_reads(variant.mmap_reads)
    return opts


def build(path: Path, variant: Variant, pairs: list[tuple[bytes, bytes]]) -> float:
    """Write `pairs` in batches of 10,000, flush, compact; the seconds the writes took."""
    db = Rdict(str(path), options=options(variant, create=True), column_families={})

    def write() -> None:
        for start in range(0, len(pairs), 10_000):
            batch = WriteBatch(raw_mode=True)
            for key, value in pairs[start : start + 10_000]:
                batch.put(key, value)
            db.write(batch)

    seconds = timed(write)
    db.flush()
    while db.property_int_value("rocksdb.compaction-pending") or db.property_int_value(
        "rocksdb.num-running-compactions"
    ):
        time.sleep(0.2)
    db.close()
    return seconds


STATS = ("filter.miss", "index.miss", "data.miss", "filter.bytes.insert")


def statistics(opts: Options) -> dict[str, int]:
    text = opts.get_statistics() or ""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" COUNT : ")
        if name.startswith("rocksdb.block.cache.") and rest:
            counts[name.removeprefix("rocksdb.block.cache.")] = int(rest)
    return counts


def measure(
    path: Path, variant: Variant, lookups: list[bytes], repeat: int
) -> tuple[float, dict[str, float], dict[str, str]]:
    """Best seconds per get over `repeat` passes, block cache events per get, properties."""
    opts = options(variant, create=False)
    # `column_families` given (empty): without it rocksdict reopens an existing database
    # with the options its OPTIONS file holds (an 8 MB cache, no filter), not `opts`.
    db = Rdict(str(path), options=opts, column_families={})
    get: Callable[[bytes], object] = db.get
    try:

        def gets() -> None:
            for key in lookups:
                get(key)

        gets()  # warm: the cache, the table readers, the page cache
        before = statistics(opts)
        best = min(timed(gets) for _ in range(repeat))
        after = statistics(opts)
        per_get = {
            name: (after.get(name, 0) - before.get(name, 0)) / (len(lookups) * repeat)
            for name in STATS
        }
        properties = {"block-cache-usage": db.property_value("rocksdb.block-cache-usage") or "?"}
        properties["files"] = "/".join(
            db.property_value(f"rocksdb.num-files-at-level{level}") or "?" for level in range(7)
        )
        properties["table-readers-mem"] = (
            db.property_value("rocksdb.estimate-table-readers-mem") or "?"
        )
        return best / len(lookups), per_get, properties
    finally:
        db.close()


def run(size: int, kind: str, variants: list[Variant], args: argparse.Namespace) -> None:
    rng = random.Random(size)
    pairs = dataset(size, kind, rng)
    lookups = [rng.choice(pairs)[0] for _ in range(args.lookups)]
    root = Path(tempfile.mkdtemp(prefix="iqstate-bench-rocksdb-options-", dir=args.dir))
    try:
        paths: dict[str, Path] = {}
        for variant in variants:
            if variant.table not in paths:
                paths[variant.table] = root / variant.table
                seconds = build(paths[variant.table], variant, pairs)
                on_disk = sum(f.stat().st_size for f in paths[variant.table].glob("*.sst"))
                print(
                    f"  table {variant.table:<16} written at {size / seconds:>9,.0f} rec/s, "
                    f"{on_disk / MB:,.0f} MB of tables"
                )
        # Two interleaved passes over the variants; the best of each variant counts.
        results: dict[str, list[tuple[float, dict[str, float], dict[str, str]]]] = {}
        for _ in range(2):
            for variant in variants:
                results.setdefault(variant.name, []).append(
                    measure(paths[variant.table], variant, lookups, args.repeat)
                )
        floor = min(min(r[0] for r in runs) for runs in results.values())
        print(
            f"  {'variant':<20}{'get us':>8}{'/best':>7}{'filter':>8}{'index':>8}{'data':>7}"
            f"{'filter MB in':>14}  files L0-L6    cache MB  readers MB"
        )
        for variant in variants:
            seconds, per_get, props = min(results[variant.name], key=lambda r: r[0])
            print(
                f"  {variant.name:<20}{seconds * 1e6:>8.2f}{seconds / floor:>6.2f}x"
                f"{per_get['filter.miss']:>8.3f}{per_get['index.miss']:>8.3f}"
                f"{per_get['data.miss']:>7.3f}{per_get['filter.bytes.insert'] / MB:>14.4f}"
                f"  {props['files']:<14}"
                f"{_mb(props['block-cache-usage']):>8}{_mb(props['table-readers-mem']):>11}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _mb(value: str) -> str:
    return f"{int(value) / MB:.1f}" if value.isdigit() else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--kinds", nargs="+", default=["json", "random"])
    parser.add_argument("--variants", nargs="+", default=[v.name for v in VARIANTS])
    parser.add_argument("--lookups", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    variants = [BY_NAME[name] for name in args.variants]
    print(calibration_line())
    for size in args.keys:
        for kind in args.kinds:
            print(f"\n{size:,} keys, {kind} values; per get: cache misses (filter, index, data)")
            run(size, kind, variants, args)
    print("\nvariants:")
    for variant in variants:
        print(f"  {variant.name:<20}{variant.note}")


if __name__ == "__main__":
    main()
