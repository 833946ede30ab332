"""Kafka's own cases for versioned stores (`RocksDBVersionedStoreTest`,
`IQv2VersionedStoreIntegrationTest`), ported: the same puts, the same expected versions,
on every engine. `None` puts are tombstones; `R` is Kafka's test retention (300,000 ms)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iqstate import MultiVersionedKeyQuery, VersionedKeyQuery, VersionedRecord
from iqstate.plugins import default_registry
from iqstate.store import VersionedKeyValueStore
from iqstate.testing import StoreFactory, make_context
from iqstate.versioned_store import decode_version_record, encode_version_record

R = 300_000
K = b"k"
Puts = list[tuple[bytes | None, int]]


@pytest.fixture(params=["memory", "rocksdb", "lmdb", "sqlite"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[int], VersionedKeyValueStore[bytes, bytes]]]:
    factory = StoreFactory.for_engine(default_registry().engine(request.param)).versioned
    assert factory is not None
    opened: list[VersionedKeyValueStore[bytes, bytes]] = []

    def open_one(retention: int = R) -> VersionedKeyValueStore[bytes, bytes]:
        store = factory(f"kafka-{len(opened)}", retention)
        store.init(make_context(tmp_path, f"kafka-{len(opened)}"))
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def put_all(store: VersionedKeyValueStore[bytes, bytes], puts: Puts, key: bytes = K) -> None:
    for value, timestamp in puts:
        store.put(key, value, timestamp)


def restore(store: VersionedKeyValueStore[bytes, bytes], puts: Puts) -> None:
    """As a replica restores: the versions as changelog records, decoded and applied."""
    records = [encode_version_record(K, timestamp, value) for value, timestamp in puts]
    store.put_all([decode_version_record(key, value) for key, value in records])


def as_of(store: VersionedKeyValueStore[bytes, bytes], at: int) -> tuple[Any, ...] | None:
    record = store.get(K, at)
    return None if record is None else (record.value, record.timestamp, record.valid_to)


def versions(
    store: VersionedKeyValueStore[bytes, bytes], key: bytes, time_from: int, time_to: int,
    ascending: bool = False,
) -> list[tuple[Any, ...]]:  # fmt: skip
    answer = store.query(MultiVersionedKeyQuery(key, time_from, time_to, ascending))
    assert answer.is_success, answer
    with answer.result as found:
        return [(r.value, r.timestamp, r.valid_to) for r in found]


# Kafka's scenarios 8 and 11 (repeated timestamps, nulls moved between segments) both end
# in this state:
REPEATS: Puts = [
    (b"tbr", 100020), (None, 99990), (b"tbr", 99990), (None, 99990), (b"tbr", 99999),
    (b"tbr", 100001), (None, 99999), (None, 100001), (None, 100010), (None, 100005),
    (b"vp5", 100005), (b"tbr", 99995), (b"vn5", 99995), (None, 100020), (None, 100020),
    (b"vn6", 99994),
]  # fmt: skip
NULLS_MOVED: Puts = [
    (None, 100020), (None, 99999), (None, 100001), (None, 99990), (None, 100010),
    (b"vp5", 100005), (b"vn5", 99995), (b"vn6", 99994),
]  # fmt: skip
RESULT_X = {
    100030: None, 100015: None, 100006: (b"vp5", 100005, 100010), 100002: None,
    100000: None, 99999: None, 99995: (b"vn5", 99995, 99999), 99994: (b"vn6", 99994, 99995),
    99992: None,
}  # fmt: skip
MOVED_OLDER: Puts = [
    (b"vp20", 100020), (b"vp10", 100010), (b"vn10", 99990), (b"vn2", 99998),
    (b"vn1", 99999), (b"vp1", 100001),
]  # fmt: skip
RESULT_Z = {
    100030: (b"vp20", 100020, None), 100015: (b"vp10", 100010, 100020),
    100005: (b"vp1", 100001, 100010), 100000: (b"vn1", 99999, 100001),
    99999: (b"vn1", 99999, 100001), 99998: (b"vn2", 99998, 99999),
    99995: (b"vn10", 99990, 99998),
}  # fmt: skip


@pytest.mark.parametrize(
    ("puts", "expected"),
    [
        pytest.param(  # shouldPutOlderWithNonNullLatest
            [(b"v", 10), (b"v2", 8), (b"v1", 9), (b"v4", 6)],
            {10: (b"v", 10, None), 9: (b"v1", 9, 10), 8: (b"v2", 8, 9), 7: (b"v4", 6, 8)},
            id="older-with-non-null-latest",
        ),
        pytest.param(  # shouldPutOlderWithNullLatest
            [(None, 10), (b"v2", 8), (b"v1", 9), (b"v4", 6)],
            {10: None, 9: (b"v1", 9, 10), 8: (b"v2", 8, 9), 7: (b"v4", 6, 8)},
            id="older-with-null-latest",
        ),
        pytest.param(  # shouldPutOlderNullWithNonNullLatest
            [(b"v", 10), (None, 8), (None, 9), (None, 6), (b"v5", 5), (b"v3", 7), (None, 4)],
            {
                10: (b"v", 10, None),
                9: None,
                8: None,
                7: (b"v3", 7, 8),
                6: None,
                5: (b"v5", 5, 6),
                4: None,
            },
            id="older-nulls-with-non-null-latest",
        ),
        pytest.param(REPEATS, RESULT_X, id="repeat-timestamps"),
        pytest.param(NULLS_MOVED, RESULT_X, id="nulls-moved-to-older-versions"),
        pytest.param(MOVED_OLDER, RESULT_Z, id="moved-to-older-versions"),
        pytest.param(  # shouldFallThroughToExistingOlderSegmentAsLatestDuringPut
            [
                (None, 99995),
                (b"vn6", 99994),
                (b"vp20", 100020),
                (None, 100010),
                (None, 99999),
                (b"vn2", 99998),
            ],
            {
                100030: (b"vp20", 100020, None),
                100012: None,
                100000: None,
                99999: None,
                99998: (b"vn2", 99998, 99999),
                99995: None,
                99994: (b"vn6", 99994, 99995),
            },
            id="fall-through-as-latest",
        ),
        pytest.param(  # shouldPutNonLatestTombstoneIntoNewSegmentWithValidTo
            [(b"vp30", 100030), (None, 99990), (b"vn5", 99995), (b"vn1", 99999), (None, 99998)],
            {
                100010: (b"vn1", 99999, 100030),
                99999: (b"vn1", 99999, 100030),
                99998: None,
                99995: (b"vn5", 99995, 99998),
                99990: None,
            },
            id="non-latest-tombstone",
        ),
        pytest.param(  # shouldDistinguishEmptyAndNull
            [
                (None, 100020),
                (None, 99990),
                (None, 99999),
                (None, 100001),
                (None, 100010),
                (b"", 100005),
                (b"", 99995),
                (b"", 99994),
            ],
            {
                100006: (b"", 100005, 100010),
                100000: None,
                99995: (b"", 99995, 99999),
                99994: (b"", 99994, 99995),
                99992: None,
            },
            id="empty-is-not-null",
        ),
    ],
)
@pytest.mark.parametrize("how", ["put", "restore"])
def test_versions_as_kafka_answers_them(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
    puts: Puts,
    expected: dict[int, tuple[Any, ...] | None],
    how: str,
) -> None:
    store = open_store(R)
    (put_all if how == "put" else restore)(store, puts)
    assert {at: as_of(store, at) for at in expected} == expected


def test_restore_of_several_batches(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """shouldRestoreMultipleBatches: two batches end where one would."""
    store = open_store(R)
    restore(store, [(None, 99980), (b"vn10", 99990), (None, 99999)])
    restore(store, [(None, 100001), (b"vp10", 100010), (None, 100020)])
    assert as_of(store, 100015) == (b"vp10", 100010, 100020)
    assert as_of(store, 99995) == (b"vn10", 99990, 99999)
    assert [as_of(store, at) for at in (100030, 100005, 100000, 99999, 99985)] == [None] * 5


def test_puts_older_than_the_retention_are_dropped(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """shouldNotPutExpired, shouldNotDeleteExpired, shouldNotRestoreExpired and
    shouldRestoreEvenIfRecordWouldBeExpiredByEndOfBatch."""
    store = open_store(R)
    store.put(b"k1", b"v1", 1)
    store.put(b"k2", b"v2", 0)  # stream time 1 when it came: kept
    store.put(K, b"v", 300010)  # the limit is 10 now
    store.put(b"k3", b"v3", 10)  # exactly at the limit: kept
    store.put(b"k4", b"v4", 9)  # below it: dropped
    store.put(b"k1", None, 9)  # a delete below it: dropped too
    assert store.get(b"k3") == VersionedRecord(b"v3", 10, None)
    assert store.get(b"k4") is None
    assert store.get(b"k1") == VersionedRecord(b"v1", 1, None)
    assert store.get(b"k2") == VersionedRecord(b"v2", 0, None)
    store.put(b"k1", None, 10)
    assert store.get(b"k1") is None


def test_history_expires_but_the_latest_version_does_not(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """shouldNotGetExpired, shouldGetExpiredIfLatestValue, and their multi-version forms."""
    store = open_store(R)
    put_all(store, [(b"v_old", 0), (b"v", 99990)])
    assert as_of(store, 99989) == (b"v_old", 0, 99990)
    store.put(b"other", b"vo", 399989)  # limit 99989: still inside
    assert as_of(store, 99989) == (b"v_old", 0, 99990)
    assert versions(store, K, 0, 99989) == [(b"v_old", 0, 99990)]
    store.put(b"other", b"vo2", 399990)  # limit 99990: just outside
    assert as_of(store, 99989) is None
    assert versions(store, K, 0, 99989) == []
    late = open_store(R)
    late.put(K, b"v", 1)
    late.put(b"o", b"vo_old", 1)
    late.put(b"o", b"vo_new", 300012)  # limit 12
    assert as_of(late, 10) == (b"v", 1, None), "the latest version never expires"
    assert late.get(b"o", 10) is None
    assert versions(late, K, 0, 10) == [(b"v", 1, None)]
    assert versions(late, b"o", 0, 10) == []


def test_zero_history_retention(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """shouldAllowZeroHistoryRetention."""
    store = open_store(0)
    store.put(K, b"v", 10)
    assert as_of(store, 11) == (b"v", 10, None)
    store.put(K, b"updated", 10)
    assert as_of(store, 10) == (b"updated", 10, None)
    store.put(K, b"v2", 12)
    assert as_of(store, 11) is None
    store.put(K, None, 13)
    assert store.get(K) is None
    store.put(b"k2", b"v", 12)  # below stream time 13
    assert store.get(b"k2") is None


def test_multi_version_queries(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """shouldGetRecordVersionsFromOlderSegments and ...InAscendingOrder."""
    store = open_store(R)
    for stamp in (99990, 199990, 299990):
        store.put(b"other", None, stamp)
    assert versions(store, K, 99980, 100000) == []
    put_all(store, [(b"v1", 99970), (b"v2", 99975), (None, 99980), (None, 99985),
                    (b"v3", 99990), (b"v4", 99995)])  # fmt: skip
    all_four = [(b"v4", 99995, None), (b"v3", 99990, 99995), (b"v2", 99975, 99980),
                (b"v1", 99970, 99975)]  # fmt: skip
    assert versions(store, K, 99960, 99965) == []
    assert versions(store, K, 99970, 99995) == all_four
    assert versions(store, K, 99996, 100000) == [(b"v4", 99995, None)]
    assert versions(store, K, 99969, 99979) == all_four[2:]
    assert versions(store, K, 99976, 99989) == [(b"v2", 99975, 99980)]
    assert versions(store, K, 99974, 99995) == all_four
    assert versions(store, K, 99985, 99990) == [(b"v3", 99990, 99995)]
    assert versions(store, K, 99981, 99984) == [], "only tombstones cover this time"
    assert versions(store, K, 99970, 99995, ascending=True) == all_four[::-1]


def test_iqv2_versioned_queries(
    open_store: Callable[[int], VersionedKeyValueStore[bytes, bytes]],
) -> None:
    """IQv2VersionedStoreIntegrationTest: key 2 with four versions, one day of history."""
    store = open_store(86_400_000)
    t = 1_672_567_200
    put_all(store, [(b"2", t), (b"20", t + 10), (b"200", t + 20), (b"2000", t + 30)])
    ask = store.query
    assert ask(VersionedKeyQuery(K)).result == VersionedRecord(b"2000", t + 30, None)
    assert ask(VersionedKeyQuery(K, t + 30)).result == VersionedRecord(b"2000", t + 30, None)
    assert ask(VersionedKeyQuery(K, t)).result == VersionedRecord(b"2", t, t + 10)
    assert ask(VersionedKeyQuery(K, t - 50)).result is None
    assert ask(VersionedKeyQuery(b"3")).result is None
    assert [v for v, _, _ in versions(store, K, t + 15, t + 1_000)] == [b"2000", b"200", b"20"]
    assert versions(store, K, t - 100, t - 50) == []
    assert versions(store, b"3", t - 100, t + 100) == []
