"""How iqstate's reads grow with the data (issue 27, item 5), on one machine.

1. **Key lookups against store size**: a store of N keys (16-byte keys, 100-byte values,
   4 partitions, `--engine`, `sync_commits=False`), for each N of `--sizes`; `--lookups`
   random existing keys through `app.query` (`KeyQuery`, `only_partition_result()`),
   timed in blocks of 1,000; the median and p99 of the per-lookup time over the blocks, and
   each against the smallest store's.
2. **Range throughput against page size**: the largest store of (1) read from end to end
   of one partition through `LimitedRangeQuery` pages of `--pages` rows (each page asking
   from the key after the last one read, as a pager does), rows per second and the time
   per page; each against the smallest page's rows per second.

Restore time against state size is `bench/kafka_restore.py --records N` (a broker, the
follower, the raw floor), run once per size.

    python bench/scaling.py [--sizes 100000 1000000 5000000] [--engine rocksdb]
        [--lookups 20000] [--pages 10 100 1000 10000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from timing import calibration_line, timed

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.queries import LimitedRangeQuery
from iqstate.runtime import partition_for_bytes

PARTITIONS = 4
LOAD_BATCH = 50_000
BLOCK = 1_000
VALUE = b"v" * 100


def key_of(number: int) -> bytes:
    return b"key-%012d" % number


def loaded(root: Path, engine: str, size: int) -> Application:
    """An application with one store of `size` keys, written in batches of `LOAD_BATCH`."""
    app = Application("scaling", root)
    config = {} if engine == "memory" else {"sync_commits": False}
    app.key_value_store(
        "s", PARTITIONS, engine=engine, key_serde="bytes", value_serde="bytes", config=config
    )
    app.start()
    for number, start in enumerate(range(0, size, LOAD_BATCH)):
        with app.begin_batch(position={"load": {0: number}}, batch_id=number) as batch:
            keys = range(start, min(size, start + LOAD_BATCH))
            batch.put_all("s", [(key_of(i), VALUE) for i in keys])
    return app


def lookup_times(app: Application, size: int, lookups: int, rng: random.Random) -> list[float]:
    """Per-lookup seconds of each block of `BLOCK` random lookups."""
    store = StateQueryRequest.in_store("s")
    keys = [key_of(rng.randrange(size)) for _ in range(lookups)]
    requests = [store.with_query(KeyQuery.with_key(key)) for key in keys]
    query = app.query
    for request in requests[:BLOCK]:  # warm the caches the loop uses
        query(request)

    def block(part: list[object]) -> None:
        for request in part:
            value = query(request).only_partition_result().result  # type: ignore[arg-type]
            assert value == VALUE

    return [
        timed(lambda part=requests[at : at + BLOCK]: block(part)) / BLOCK
        for at in range(0, lookups, BLOCK)
    ]


def page_through(app: Application, partition: int, page: int) -> tuple[int, float, int]:
    """Rows, seconds and pages to read `partition` end to end in pages of `page` rows."""
    query = app.query
    lower: bytes | None = None
    rows = pages = 0
    start = time.perf_counter()
    while True:
        request = (
            StateQueryRequest.in_store("s")
            .with_query(LimitedRangeQuery(lower, None, False, page))
            .with_partitions({partition})
        )
        with query(request).partition_results[partition].result as found:  # type: ignore[union-attr]
            got = list(found)
        pages += 1
        rows += len(got)
        if len(got) < page:
            return rows, time.perf_counter() - start, pages
        lower = got[-1][0] + b"\x00"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000])
    parser.add_argument("--engine", default="rocksdb")
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--pages", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    args = parser.parse_args()
    rng = random.Random(7)
    print(calibration_line())
    print(f"1. KeyQuery through app.query against store size ({args.engine})")
    base = None
    largest: tuple[Path, Application] | None = None
    for size in sorted(args.sizes):
        root = Path(tempfile.mkdtemp(prefix="iqstate-scaling-"))
        started = time.perf_counter()
        app = loaded(root, args.engine, size)
        load_s = time.perf_counter() - started
        times = lookup_times(app, size, args.lookups, rng)
        median = statistics.median(times) * 1e6
        p99 = sorted(times)[min(len(times) - 1, int(len(times) * 0.99))] * 1e6
        base = base or median
        print(
            f"   {size:>11,} keys (loaded in {load_s:6.1f} s): median {median:6.2f} us, "
            f"p99 of blocks {p99:6.2f} us, {median / base:5.2f}x the smallest"
        )
        if largest is not None:
            largest[1].close()
            shutil.rmtree(largest[0], ignore_errors=True)
        largest = (root, app)
    assert largest is not None
    root, app = largest
    partition = partition_for_bytes(key_of(0), PARTITIONS)
    print(f"2. one partition of the {max(args.sizes):,}-key store paged end to end")
    first_rate = None
    for page in sorted(args.pages):
        rows, seconds, pages = page_through(app, partition, page)
        rate = rows / seconds
        first_rate = first_rate or rate
        print(
            f"   page {page:>6,} rows: {rate:12,.0f} rows/s, "
            f"{seconds / pages * 1e6:9.1f} us a page ({rows:,} rows in {pages:,} pages), "
            f"{rate / first_rate:5.2f}x the smallest page's rate"
        )
    app.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
