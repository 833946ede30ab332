"""Cost of the query path: IQv2 queries through the full layer chain vs a raw SortedDict.

Two chains, as the runtime builds them, with string keys and values: the default one
(metered -> memory engine) and the full one (metered -> caching -> change-logging ->
memory engine). The baseline is the same lookup on a `SortedDict` of the same Python
strings, in the same process. Lookups go to keys that are not in the cache, so every
query travels the whole chain to the engine.

    python bench/query_path.py [--keys 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from typing import Any

from sortedcontainers import SortedDict
from timing import calibration_line

from iqstate import InMemoryChangelog, KeyQuery, RangeQuery, Serdes, StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.layers import build_key_value_chain


def best_ns_per_item(
    operation: Callable[[list[Any]], object], items: list[Any], repeat: int
) -> float:
    """The fastest of `repeat` passes of `operation` over `items`, in ns per item."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.perf_counter_ns()
            operation(items)
            best = min(best, (time.perf_counter_ns() - start) / len(items))
    finally:
        gc.enable()
    return best


def build_store(keys: list[str], *, caching: bool, logging: bool) -> Any:
    store = build_key_value_chain(
        MemoryKeyValueStore("bench"),
        Serdes.string(),
        Serdes.string(),
        caching=caching,
        logging=logging,
    )
    store.init(
        StateStoreContext(
            application_id="bench",
            store_name="bench",
            partition=0,
            changelog_writer=InMemoryChangelog(),
        )
    )
    for start in range(0, len(keys), 10_000):
        store.put_all([(key, f"value-{key}") for key in keys[start : start + 10_000]])
        store.commit({})
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    keys = [f"key-{i:09d}" for i in range(args.keys)]
    raw: SortedDict = SortedDict((key, f"value-{key}") for key in keys)

    chains = {
        "default chain": build_store(keys, caching=False, logging=False),
        "full chain": build_store(keys, caching=True, logging=True),
    }

    rng = random.Random(7)
    lookups = [rng.choice(keys) for _ in range(200_000)]
    queries = [KeyQuery.with_key(key) for key in lookups]
    starts = [rng.randrange(0, len(keys) - 100) for _ in range(2_000)]
    bounds = [(keys[s], keys[s + 99]) for s in starts]
    ranges = [RangeQuery.with_range(lower, upper) for lower, upper in bounds]

    def raw_gets(items: list[str]) -> None:
        get = raw.get
        for key in items:
            get(key)

    def layered_key_queries(store: Any) -> Callable[[list[KeyQuery[str, str]]], None]:
        def run(items: list[KeyQuery[str, str]]) -> None:
            query = store.query
            for key_query in items:
                _ = query(key_query).result

        return run

    def raw_ranges(items: list[tuple[str, str]]) -> None:
        for lower, upper in items:
            [(key, raw[key]) for key in raw.irange(lower, upper)]

    def layered_ranges(store: Any) -> Callable[[list[RangeQuery[str, str]]], None]:
        def run(items: list[RangeQuery[str, str]]) -> None:
            for range_query in items:
                with store.query(range_query).result as iterator:
                    list(iterator)

        return run

    raw_key_ns = best_ns_per_item(raw_gets, lookups, args.repeat)
    raw_range_ns = best_ns_per_item(raw_ranges, bounds, args.repeat)
    results = {}
    for label, store in chains.items():
        assert len(list(store.query(ranges[0]).result)) == 100
        key_ns = best_ns_per_item(layered_key_queries(store), queries, args.repeat)
        range_ns = best_ns_per_item(layered_ranges(store), ranges, args.repeat)
        results[f"KeyQuery, {label}"] = (raw_key_ns, key_ns)
        results[f"RangeQuery(100), {label}"] = (raw_range_ns, range_ns)

    print(calibration_line())
    print(f"keys={args.keys} serdes=string/string, best of {args.repeat} passes")
    print(f"{'operation':<32}{'raw SortedDict':>16}{'iqstate':>12}{'ratio':>8}{'extra':>12}")
    for name, (raw_ns, layered_ns) in results.items():
        print(
            f"{name:<32}{raw_ns / 1000:>13.2f} us{layered_ns / 1000:>9.2f} us"
            f"{layered_ns / raw_ns:>7.2f}x{(layered_ns - raw_ns) / 1000:>9.2f} us"
        )


if __name__ == "__main__":
    main()
