"""JSON values: the serde's encode and decode, and ingest and lookups through the app.

Values are distinct pipeline-output records of about 100 bytes (an id, counters, a score,
a region, a flag, a timestamp). Compared in the same run, alternated, best of each:

* encode / decode of one value: the standard library as `JsonSerde` used it before
  (`StdlibJson` below), `Serdes.json()` (msgspec, checked against the standard library),
  and bare orjson / msgspec for reference (the encoded values are kept, as a batch keeps
  them: orjson's encoder is several times slower then than when each result is dropped);
* ingest through `begin_batch` on RocksDB (batches of 10,000) with each serde, against a
  raw `WriteBatch` of the same, already serialized bytes;
* `KeyQuery` through `app.query` on the same data with each serde.

    python bench/json_serde.py [--records 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
from range_path import RawRocksDB
from timing import calibration_line, timed

from iqstate import Application, KeyQuery, Serde, Serdes, StateQueryRequest

BATCH = 10_000
LOOKUPS = 50_000
REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1")


class StdlibJson(Serde[Any]):
    """`JsonSerde` as it was: the standard library's encoder and decoder only."""

    name = "json-stdlib"
    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    _decoder = json.JSONDecoder()

    def serialize(self, value: Any) -> bytes:
        return self._encoder.encode(value).encode("utf-8")

    def deserialize(self, data: bytes) -> Any:
        return self._decoder.decode(bytes(data).decode("utf-8"))


def values(count: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "user": f"u{rng.getrandbits(40):012x}",
            "clicks": rng.randrange(10_000),
            "orders": rng.randrange(100),
            "score": round(rng.random(), 4),
            "region": rng.choice(REGIONS),
            "active": rng.random() < 0.5,
            "ts": 1_700_000_000_000 + rng.randrange(10**9),
        }
        for _ in range(count)
    ]


def best_per_item(
    operations: dict[str, Callable[[], object]], items: int, repeat: int
) -> dict[str, float]:
    """Each operation's best time over `repeat` alternated rounds, in us per item."""
    best = dict.fromkeys(operations, float("inf"))
    for _ in range(repeat):
        for name, operation in operations.items():
            best[name] = min(best[name], timed(operation) / items * 1e6)
    return best


def bench_codecs(sample: list[dict[str, Any]], repeat: int) -> None:
    stdlib, serde = StdlibJson(), Serdes.json()
    encoded = [stdlib.serialize(value) for value in sample]
    assert [serde.serialize(value) for value in sample] == encoded
    assert [serde.deserialize(data) for data in encoded] == sample
    decoder = msgspec.json.Decoder()
    encode = best_per_item(
        {
            "stdlib": lambda: list(map(stdlib.serialize, sample)),
            "Serdes.json()": lambda: list(map(serde.serialize, sample)),
            "bare orjson": lambda: list(map(orjson.dumps, sample)),
            "bare msgspec": lambda: list(map(msgspec.json.encode, sample)),
        },
        len(sample),
        repeat,
    )
    decode = best_per_item(
        {
            "stdlib": lambda: list(map(stdlib.deserialize, encoded)),
            "Serdes.json()": lambda: list(map(serde.deserialize, encoded)),
            "bare orjson": lambda: list(map(orjson.loads, encoded)),
            "bare msgspec": lambda: list(map(decoder.decode, encoded)),
        },
        len(sample),
        repeat,
    )
    size = sum(map(len, encoded)) / len(encoded)
    print(f"\none value ({size:.0f} bytes on average), us per value, best of {repeat}")
    print(f"  {'':<16}{'encode':>10}{'decode':>10}")
    for name in encode:
        print(f"  {name:<16}{encode[name]:>10.2f}{decode[name]:>10.2f}")
    print(
        f"  Serdes.json() against stdlib: encode {encode['stdlib'] / encode['Serdes.json()']:.1f}x"
        f" faster, decode {decode['stdlib'] / decode['Serdes.json()']:.1f}x faster"
    )


def bench_app(records: list[tuple[str, dict[str, Any]]], repeat: int, rng: random.Random) -> None:
    root = Path(tempfile.mkdtemp(prefix="iqstate-json-"))
    serdes: dict[str, Serde[Any]] = {"stdlib": StdlibJson(), "Serdes.json()": Serdes.json()}
    serialized = [(key.encode(), Serdes.json().serialize(value)) for key, value in records]
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    raw_batches = [serialized[i : i + BATCH] for i in range(0, len(serialized), BATCH)]
    try:
        rounds = {name: 0 for name in [*serdes, "raw"]}
        apps: dict[str, Application] = {}

        def ingest(name: str) -> Callable[[], None]:
            def run() -> None:
                number = rounds[name]
                rounds[name] += 1
                directory = root / f"{name}-{number}"
                if name == "raw":
                    raw = RawRocksDB(directory)
                    for pairs in raw_batches:
                        raw.write(pairs)
                    raw.close()
                    return
                app = Application("bench", directory)
                app.key_value_store(
                    "s",
                    1,
                    engine="rocksdb",
                    value_serde=serdes[name],
                    config={"sync_commits": False},
                )
                app.start()
                for batch_id, batch in enumerate(batches):
                    with app.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id) as w:
                        w.put_all("s", batch)
                apps.setdefault(name, app)
                if apps[name] is not app:
                    app.close()

            return run

        ingest_us = best_per_item({name: ingest(name) for name in rounds}, len(records), repeat)
        lookups = [rng.choice(records)[0] for _ in range(LOOKUPS)]
        requests = [
            StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(k)) for k in lookups
        ]

        def lookup(app: Application) -> Callable[[], None]:
            def run() -> None:
                query = app.query
                for request in requests:
                    query(request).only_partition_result()

            return run

        lookup_us = best_per_item({name: lookup(apps[name]) for name in serdes}, LOOKUPS, repeat)
        for app in apps.values():
            app.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = len(records)
    print(f"\nRocksDB, {n:,} records in batches of {BATCH:,}, best of {repeat} alternated rounds")
    raw = ingest_us["raw"]
    print(f"  raw WriteBatch of the serialized bytes {1e6 / raw:>10,.0f} rec/s")
    for name in serdes:
        print(
            f"  begin_batch, {name:<14} {1e6 / ingest_us[name]:>10,.0f} rec/s"
            f"   {raw / ingest_us[name]:.2f} of raw    KeyQuery {lookup_us[name]:.2f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(11)
    records = [(f"{rng.getrandbits(64):016x}", value) for value in values(args.records, rng)]
    print(calibration_line())
    print("the machine may be shared: compare ratios within a table, not absolute times")
    bench_codecs([value for _, value in records[:20_000]], args.repeat)
    bench_app(records, args.repeat, rng)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - started:.0f} s)")
