"""The runtime's costs against the raw memory engine, in the same process.

(a) `app.query` with a `KeyQuery` on a memory store of N keys over 4 partitions, against
    the raw engine `get` of the same (pre-serialized) key on its partition's engine store;
(b) ingest of N records with shuffled keys through `begin_batch` (batches of 10,000), against
    raw engine `put_all` of the same records already serialized and partitioned.

    python bench/runtime.py [--keys 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from typing import Any

from timing import calibration_line, timed

from iqstate import Application, KeyQuery, StateQueryRequest, StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.runtime import partition_for_bytes

PARTITIONS = 4
BATCH = 10_000


def raw_engines() -> list[MemoryKeyValueStore]:
    stores = []
    for partition in range(PARTITIONS):
        store = MemoryKeyValueStore("raw")
        store.init(StateStoreContext(application_id="raw", store_name="raw", partition=partition))
        stores.append(store)
    return stores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    rng = random.Random(11)
    keys = [f"user-{i:010d}" for i in range(args.keys)]
    rng.shuffle(keys)
    values = [f"value-{i}" for i in range(args.keys)]

    # (b) ingest --------------------------------------------------------------------------
    def iqstate_ingest(bulk: bool) -> Application:
        app = Application("bench", tempfile.mkdtemp(prefix="iqstate-bench-"))
        app.key_value_store("s", PARTITIONS, value_serde="string")
        app.start()
        for number, start in enumerate(range(0, len(keys), BATCH)):
            pairs = zip(keys[start : start + BATCH], values[start : start + BATCH], strict=True)
            with app.begin_batch(position={"src": {0: start + BATCH}}, batch_id=number) as batch:
                if bulk:
                    batch.put_all("s", pairs)
                else:
                    put = batch.put
                    for key, value in pairs:
                        put("s", key, value)
        return app

    encoded = [
        (partition_for_bytes(key.encode(), PARTITIONS), key.encode(), value.encode())
        for key, value in zip(keys, values, strict=True)
    ]
    engines = raw_engines()

    def raw_ingest() -> None:
        for start in range(0, len(encoded), BATCH):
            per_partition: list[list[tuple[bytes, bytes | None]]] = [[] for _ in range(PARTITIONS)]
            for partition, key_bytes, value_bytes in encoded[start : start + BATCH]:
                per_partition[partition].append((key_bytes, value_bytes))
            for partition, entries in enumerate(per_partition):
                engines[partition].put_all(entries)
                engines[partition].commit({})

    apps: list[Application] = []
    ingest_s = timed(lambda: apps.append(iqstate_ingest(bulk=False)))
    bulk_ingest_s = timed(lambda: apps.append(iqstate_ingest(bulk=True)))
    raw_ingest_s = timed(raw_ingest)
    apps[0].close()
    app = apps[1]

    # (a) key lookups ---------------------------------------------------------------------
    lookups = [rng.choice(keys) for _ in range(200_000)]
    requests = [StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(k)) for k in lookups]
    raw_lookups = [
        (engines[partition_for_bytes(k.encode(), PARTITIONS)], k.encode()) for k in lookups
    ]

    def app_queries() -> None:
        query = app.query
        for request in requests:
            only: Any = query(request).only_partition_result()
            _ = only.result

    def raw_gets() -> None:
        for engine, key_bytes in raw_lookups:
            engine.get(key_bytes)

    explicit = [
        StateQueryRequest.in_store("s")
        .with_query(KeyQuery.with_key(k))
        .with_partitions({partition_for_bytes(k.encode(), PARTITIONS)})
        for k in lookups
    ]

    def app_queries_with_partition() -> None:
        query = app.query
        for request in explicit:
            only: Any = query(request).only_partition_result()
            _ = only.result

    # Interleaved rounds, best of each: a busy moment on the machine hits all three alike.
    rounds = [
        (timed(raw_gets), timed(app_queries), timed(app_queries_with_partition))
        for _ in range(args.repeat)
    ]
    raw_s, query_s, explicit_s = (min(column) for column in zip(*rounds, strict=True))
    app.close()

    n = len(lookups)
    print(calibration_line())
    print(f"keys={args.keys} partitions={PARTITIONS} engine=memory serdes=string/string")
    print(f"(a) raw engine get: {raw_s / n * 1e6:.2f} us")
    for label, seconds in (("all partitions", query_s), ("partition given", explicit_s)):
        print(
            f"    app.query KeyQuery, {label}: {seconds / n * 1e6:.2f} us   ratio "
            f"{seconds / raw_s:.1f}x   extra {(seconds - raw_s) / n * 1e6:.2f} us"
        )
    raw_rate = args.keys / raw_ingest_s
    print(f"(b) raw engine put_all (serialized, partitioned): {raw_rate:,.0f} records/s")
    for label, seconds in (("batch.put", ingest_s), ("batch.put_all", bulk_ingest_s)):
        rate = args.keys / seconds
        print(f"    begin_batch + {label}: {rate:,.0f} records/s   ratio {rate / raw_rate:.2f}")


if __name__ == "__main__":
    main()
