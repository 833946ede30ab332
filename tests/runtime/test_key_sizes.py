"""Keys an engine cannot keep (LMDB: 1 to 511 bytes, less what each store type's layout
adds) are refused where the batch puts them, naming the size: nothing of the batch is
written, on any partition. Keys at the limit are kept. A follower skips such a record
(see `HostedPartition.record_problem`) instead of failing its commit at every try."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iqstate import (
    Application,
    Engine,
    KeyQuery,
    RangeQuery,
    StateQueryRequest,
    WindowRangeQuery,
)
from iqstate.keyspace import encode_window_key
from iqstate.session_store import encode_session_key
from iqstate.versioned_store import encode_version_record

LONGEST = {"key_value": 511, "window": 502, "versioned_key_value": 502, "session": 490}


def declared(tmp_path: Path) -> Application:
    app = Application("sizes", tmp_path)
    app.key_value_store("kv", 2, engine="lmdb", key_serde="bytes", value_serde="string")
    app.window_store("w", 1, window_size_ms=10, retention_ms=1_000, engine="lmdb",
                     key_serde="bytes", value_serde="string")  # fmt: skip
    app.versioned_key_value_store("v", 1, 1_000, engine="lmdb", key_serde="bytes",
                                  value_serde="string")  # fmt: skip
    app.session_store("s", 1, 1_000, engine="lmdb", key_serde="bytes", value_serde="string")
    return app


def put(batch: Any, store: str, key: bytes) -> None:
    extras: dict[str, Any] = {
        "kv": {},
        "w": {"window_start": 10},
        "v": {"timestamp": 10},
        "s": {"session": (10, 20)},
    }[store]
    batch.put(store, key, "x", **extras)


STORES = {"kv": "key_value", "w": "window", "v": "versioned_key_value", "s": "session"}


def answers(app: Application, store: str) -> list[Any]:
    """Every row of the store, all partitions."""
    queries: dict[str, Any] = {
        "kv": RangeQuery.with_no_bounds(),
        "w": WindowRangeQuery.with_window_start_range(0, 100),
        "s": WindowRangeQuery(0, 100),
    }
    request = StateQueryRequest.in_store(store).with_query(queries[store])
    found = []
    for result in app.query(request).partition_results.values():
        assert result.is_success, result
        with result.result as rows:
            found.extend(rows)
    return found


@pytest.mark.parametrize("store", ["kv", "w", "s"])
def test_the_longest_key_is_kept_and_one_more_byte_refused(tmp_path: Path, store: str) -> None:
    longest = LONGEST[STORES[store]]
    with declared(tmp_path) as app:
        with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
            put(batch, store, b"k" * longest)
        assert len(answers(app, store)) == 1, "the longest key commits and reads back"
        with (
            pytest.raises(ValueError, match=rf"a key of {longest + 1} bytes, which engine 'lmdb'"),
            app.begin_batch(position={"in": {0: 2}}, batch_id=2) as batch,
        ):
            put(batch, store, b"k" * (longest + 1))
        assert len(answers(app, store)) == 1


def test_a_versioned_key_at_the_limit_is_kept(tmp_path: Path) -> None:
    with declared(tmp_path) as app:
        with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
            put(batch, "v", b"v" * 502)
        request = StateQueryRequest.in_store("v").with_query(KeyQuery.with_key(b"v" * 502))
        assert app.query(request).only_partition_result().result == "x"  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="cannot keep in a versioned_key_value store"):
            with app.begin_batch() as batch:
                put(batch, "v", b"v" * 503)


def test_a_refused_key_writes_nothing_of_the_batch(tmp_path: Path) -> None:
    # The partitions put before the bad key would have committed before the engine refused
    # it at its commit: now the put refuses it, and no partition gets any of the batch.
    with declared(tmp_path) as app:
        with pytest.raises(ValueError, match=r"a key of 0 bytes.*keys of 1 to 511 bytes"):
            with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
                batch.put_all("kv", [(f"key-{n}".encode(), "v") for n in range(20)])
                batch.put("kv", b"", "empty")  # an empty key: LMDB keeps none
        with pytest.raises(ValueError, match=r"a key of 600 bytes,.*\(key b'xxx"):
            with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
                batch.put_all("kv", [(b"a", "1"), (b"x" * 600, "2"), (b"b", "3")])
        assert answers(app, "kv") == []
        with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
            put(batch, "w", b"")  # a window store's key lies inside its layout: it may be empty
        assert len(answers(app, "w")) == 1


def test_engines_without_limits_take_any_key(tmp_path: Path) -> None:
    app = Application("any", tmp_path)
    app.key_value_store("kv", 1, engine="rocksdb", key_serde="bytes", value_serde="string")
    with app:
        with app.begin_batch() as batch:
            batch.put("kv", b"", "empty")
            batch.put("kv", b"x" * 4_000, "long")
        assert len(answers(app, "kv")) == 2


def test_a_follower_is_told_which_records_it_cannot_apply(tmp_path: Path) -> None:
    app = declared(tmp_path)
    checks = {name: spec.record_check for name, spec in app.stores.items()}
    for name, good, bad in [
        ("kv", b"k" * 511, b"k" * 512),
        ("w", encode_window_key(b"k" * 502, 5), encode_window_key(b"k" * 503, 5)),
        ("s", encode_session_key(b"k" * 490, 5, 9), encode_session_key(b"k" * 491, 5, 9)),
        ("v", encode_version_record(b"k" * 502, 5, b"x")[0],
         encode_version_record(b"k" * 503, 5, b"x")[0]),
    ]:  # fmt: skip
        check = checks[name]
        assert check is not None
        value = encode_version_record(b"k", 5, b"x")[1] if name == "v" else b"x"
        assert check(good, value) is None, name
        assert "which engine 'lmdb' cannot keep" in str(check(bad, value)), name
    assert checks["kv"] is not None and "a key of 0 bytes" in str(checks["kv"](b"", b"x"))


def test_key_sizes_must_be_two_ordered_ints() -> None:
    for bad in [(5, 1), (1,), (-1, 5), ("1", 5), (True, 5)]:
        with pytest.raises(TypeError, match="key_sizes must be"):
            Engine("e", key_value_store="x:y", key_sizes=bad)  # type: ignore[arg-type]
