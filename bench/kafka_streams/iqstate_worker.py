"""iqstate's side of one round, in its own process (compare.py runs it): restore, then lookups.

Restore as bench/kafka_restore.py does it: an `Application` with one RocksDB key-value store
(string serdes) in a fresh state directory, hosting every partition as its active through
the real `Follower` (no membership), timed from `start()` until every partition has
committed the end of its changelog and answers the key written last to it. Then, on the
same open application, the lookups and ranges of the workload in tight loops through
`Application.query` (the Python API), after a warm-up, with the collector paused
(bench/timing.py). Prints one JSON line shaped as the Java harness's.

    python bench/kafka_streams/iqstate_worker.py --bootstrap HOST:PORT --app-id ID
        --partitions 4 --workload FILE --operations N --warmup N [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data import STORE, read_workload
from iqstate_kafka import KafkaCluster
from kafka_restore import _Standalone
from timing import timed

from iqstate import Application, KeyQuery, RangeQuery, StateQueryRequest

Lookups = list[tuple[str, int]]
Ranges = list[tuple[int, str, str]]


def key_all(app: Application, key: str) -> object:
    """`KeyQuery` over all partitions (iqstate asks only the key's partition)."""
    request = StateQueryRequest.in_store(STORE).with_query(KeyQuery.with_key(key))
    only = app.query(request).only_partition_result()
    return None if only is None else only.result


def key_in(app: Application, key: str, partition: int, active: bool = False) -> object:
    """`KeyQuery` naming its partition; the value, or None when absent or failed."""
    request = (
        StateQueryRequest.in_store(STORE)
        .with_query(KeyQuery.with_key(key))
        .with_partitions({partition})
    )
    if active:
        request = request.require_active()
    answer = app.query(request).partition_results.get(partition)
    return answer.result if answer is not None and answer.is_success else None


def range_rows(app: Application, partition: int, lower: str, upper: str) -> int:
    """A `RangeQuery` on one partition, read to its end; the number of rows."""
    query: RangeQuery[str, str] = RangeQuery.with_range(lower, upper)
    request = StateQueryRequest.in_store(STORE).with_query(query).with_partitions({partition})
    answer = app.query(request).partition_results[partition]
    if not answer.is_success:
        raise RuntimeError(f"range failed: {answer}")
    rows = 0
    with answer.result as pairs:
        for _ in pairs:
            rows += 1
    return rows


def iterations(loop: str, operations: int) -> int:
    """How many queries a loop of `operations` runs: ranges run a tenth as many."""
    return max(1, operations // 10) if loop == "range100" else operations


def loops(
    app: Application, lookups: Lookups, ranges: Ranges, operations: int
) -> dict[str, Callable[[], int]]:
    """The three loops of the Java harness, over the same items; each returns its finds."""

    def all_partitions() -> int:
        return sum(
            key_all(app, lookups[i % len(lookups)][0]) is not None for i in range(operations)
        )

    def named_partition() -> int:
        return sum(key_in(app, *lookups[i % len(lookups)]) is not None for i in range(operations))

    def range100() -> int:
        return sum(
            range_rows(app, *ranges[i % len(ranges)])
            for i in range(iterations("range100", operations))
        )

    return {"key_all": all_partitions, "key_partition": named_partition, "range100": range100}


def timed_count(loop: Callable[[], int]) -> tuple[float, int]:
    """The loop's seconds (collector paused, bench/timing.py) and what it found."""
    found: list[int] = []
    seconds = timed(lambda: found.append(loop()))
    return seconds, found[0]


def restored(app: Application, standalone: _Standalone, last: dict[int, tuple[str, str]]) -> bool:
    """Every partition committed its changelog's end and answers its last-written key."""
    assert standalone.connection is not None
    follower = standalone.connection.follower
    assert follower is not None
    lags = follower.lags()
    if len(lags) != len(last) or any(lags.values()):
        return False
    return all(key_in(app, key, p, active=True) == value for p, (key, value) in last.items())


def run(args: argparse.Namespace) -> dict[str, object]:
    lookups, ranges, last = read_workload(Path(args.workload))
    state = Path(tempfile.mkdtemp(prefix="iqstate-vs-streams-"))
    standalone = _Standalone(
        KafkaCluster(args.bootstrap, timeout=30.0), {"reader_processes": args.reader_processes}
    )
    app = Application(args.app_id, state, cluster=standalone)
    config = {} if args.compression is None else {"compression": args.compression}
    app.key_value_store(
        STORE,
        args.partitions,
        engine="rocksdb",
        key_serde="string",
        value_serde="string",
        config=config,
    )
    try:
        started = time.perf_counter()
        app.start()
        while not restored(app, standalone, last):
            time.sleep(0.005)  # as bench/kafka_restore.py polls
        out: dict[str, object] = {"restore_seconds": time.perf_counter() - started}
        out.update(operations=args.operations, warmup=args.warmup)
        for loop in loops(app, lookups, ranges, args.warmup).values():
            loop()
        timed_loops = loops(app, lookups, ranges, args.operations)
        micros: dict[str, list[float]] = {name: [] for name in timed_loops}
        for _ in range(args.repeats):
            for name, loop in timed_loops.items():
                seconds, out[f"{name}_found"] = timed_count(loop)
                micros[name].append(seconds * 1e6 / iterations(name, args.operations))
        out.update({f"{name}_us": values for name, values in micros.items()})
        return out
    finally:
        app.close()
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--operations", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compression", help="RocksDB compression (default: iqstate's)")
    parser.add_argument("--reader-processes", type=int, default=0)
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
