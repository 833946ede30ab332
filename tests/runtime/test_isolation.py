"""Read isolation: queries from many threads never see part of a batch."""

from __future__ import annotations

import threading
from collections.abc import Callable

from iqstate import Application, KeyQuery, RangeQuery, StateQueryRequest

MakeApp = Callable[..., Application]
KEYS = [f"k{i}" for i in range(40)]
BATCHES = 1_000


def test_values_and_positions_belong_to_one_committed_batch(make_app: MakeApp) -> None:
    """Batch n writes value n to every key at position n; a reader must never see a mix."""
    app = make_app()
    app.key_value_store("s", 4, value_serde="int64", caching=16)
    app.start()
    with app.begin_batch(position={"src": {0: 0}}, batch_id=0) as batch:
        for key in KEYS:
            batch.put("s", key, 0)
    problems: list[str] = []
    reads = [0]
    done = threading.Event()

    def write() -> None:
        try:
            for number in range(1, BATCHES + 1):
                with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
                    for key in KEYS:
                        batch.put("s", key, number)
        finally:
            done.set()

    def read_ranges() -> None:
        while not done.is_set():
            result = app.query(
                StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds())
            )
            reads[0] += 1
            for partition, partition_result in result.partition_results.items():
                offset = partition_result.position.partition_offsets("src")[0]
                values = {value for _, value in partition_result.result}
                if values != {offset}:
                    problems.append(f"partition {partition} at {offset} saw values {values}")

    def read_keys() -> None:
        index = 0
        while not done.is_set():
            key = KEYS[index % len(KEYS)]
            index += 1
            reads[0] += 1
            only = app.query(
                StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(key))
            ).only_partition_result()
            assert only is not None
            offset = only.position.partition_offsets("src")[0]
            if only.result != offset:
                problems.append(f"{key} = {only.result} at position {offset}")

    threads = [threading.Thread(target=write)] + [
        threading.Thread(target=target)
        for target in (read_ranges, read_keys, read_ranges, read_keys)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert problems == []
    assert reads[0] > BATCHES, "readers ran concurrently with the writer"
    final = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
    assert {v for r in final.partition_results.values() for _, v in r.result} == {BATCHES}
