"""The contrib SQLite engine: conformance, its own query, crashes, damage, fsync, options."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest
from iqstate_sqlite import SQLITE_ENGINE, SQLiteKeyValueStore, SQLiteWindowStore, StorageStatsQuery
from support.engine_stores import opened

from iqstate import (
    Application,
    CorruptStateError,
    FailureReason,
    Position,
    StateQueryRequest,
    StateStorageError,
    TopicPartition,
)
from iqstate.codec import encode_offset, encode_position
from iqstate.context import ProcessingGuarantee
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory

TP = TopicPartition("app-s-changelog", 0)


class TestSQLiteConformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(SQLITE_ENGINE)

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, SQLiteKeyValueStore | SQLiteWindowStore)
        store.abandon()


def test_its_own_query_passes_the_upper_layers_untouched(tmp_path: Path) -> None:
    app = Application("stats", tmp_path)
    app.key_value_store("s", 2, engine="sqlite", caching=True, value_serde="string")
    app.key_value_store("m", 1)
    with app:
        with app.begin_batch() as batch:
            batch.put_all("s", [("a", "xx"), ("bb", "yyy"), ("ccc", "z")])
        request = (
            StateQueryRequest.in_store("s").with_query(StorageStatsQuery()).enable_execution_info()
        )
        result = app.query(request)
        totals = {"entries": 0, "key_bytes": 0, "value_bytes": 0}
        for partition_result in result.partition_results.values():
            for name, value in partition_result.result.items():
                totals[name] += value
            layers = [entry.split(" store ")[0] for entry in partition_result.execution_info]
            assert layers == ["sqlite.key_value", "caching.key_value", "metered.key_value"]
            assert "passed down" in partition_result.execution_info[-1]
        assert totals == {"entries": 3, "key_bytes": 6, "value_bytes": 6}
        other = app.query(StateQueryRequest.in_store("m").with_query(StorageStatsQuery()))
        assert {r.failure_reason for r in other.partition_results.values()} == {
            FailureReason.UNKNOWN_QUERY_TYPE
        }


def open_store(
    root: Path,
    guarantee: ProcessingGuarantee = "exactly_once",
    *,
    sync: bool = False,
    **config: object,
) -> SQLiteKeyValueStore:
    return opened(SQLiteKeyValueStore("s"), root, guarantee, sync=sync, **config)


def database_file(root: Path) -> Path:
    return root / "s" / "0" / "sqlite" / "store.db"


def filled(root: Path, keys: int = 5000) -> None:
    store = open_store(root)
    store.put_all([(b"key-%06d" % i, b"%100d" % i) for i in range(keys)])
    store.update_position(Position.from_map({"src": {0: 4}}))
    store.commit({TP: 7})
    store.close()


def test_a_crash_leaves_the_last_commit_under_either_guarantee(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.put(b"k", b"v")
    store.commit({TP: 1})
    store.put(b"uncommitted", b"x")
    store.abandon()
    for guarantee in ("exactly_once", "at_least_once"):
        reopened = open_store(tmp_path, guarantee)
        assert reopened.get(b"k") == b"v" and reopened.committed_offset(TP) == 1
        assert reopened.get(b"uncommitted") is None
        reopened.abandon()


def test_an_emptied_meta_table_is_refused_instead_of_dropping_position_and_fence(
    tmp_path: Path,
) -> None:
    filled(tmp_path)
    with sqlite3.connect(database_file(tmp_path)) as raw:
        raw.execute("DELETE FROM meta")
    with pytest.raises(CorruptStateError, match="status marker") as raised:
        open_store(tmp_path)
    assert str(database_file(tmp_path).parent) in str(raised.value)


def test_lost_offsets_beside_data_are_refused(tmp_path: Path) -> None:
    filled(tmp_path)
    with sqlite3.connect(database_file(tmp_path)) as raw:
        raw.execute("DELETE FROM meta WHERE name NOT IN ('status', 'format')")
    with pytest.raises(CorruptStateError, match="no committed position"):
        open_store(tmp_path)


@pytest.mark.parametrize("damage", ["empty", "deleted"])
def test_an_empty_or_deleted_database_does_not_open_as_an_empty_store(
    tmp_path: Path, damage: str
) -> None:
    filled(tmp_path, 10)
    if damage == "empty":
        os.truncate(database_file(tmp_path), 0)
    else:
        database_file(tmp_path).unlink()
    with pytest.raises(CorruptStateError, match="store.db"):
        open_store(tmp_path)


def test_damaged_pages_are_corrupt_state_naming_the_database(tmp_path: Path) -> None:
    filled(tmp_path)
    path = database_file(tmp_path)
    with path.open("r+b") as handle:
        handle.seek(path.stat().st_size // 2)
        handle.write(random.Random(1).randbytes(4096))
    store = open_store(tmp_path, "at_least_once")
    try:
        with pytest.raises(CorruptStateError, match=f"{path.parent} cannot be read.*malformed"):
            list(store.all())
    finally:
        store.close()


def test_commits_are_fsynced_when_the_runtime_asks_unless_the_store_says_otherwise(
    tmp_path: Path,
) -> None:
    cases = [(True, {}, True), (False, {}, False), (True, {"sync_commits": False}, False)]
    cases.append((False, {"sync_commits": True}, True))
    for runtime_asks, config, syncs in cases:
        store = open_store(tmp_path, sync=runtime_asks, **config)
        assert store.syncs_commits is syncs
        store.put(b"k", b"v")
        store.commit({TP: 1})
        store.close()


def test_options_are_validated_when_the_store_is_declared(tmp_path: Path) -> None:
    app = Application("app", tmp_path)
    with pytest.raises(ValueError, match="unknown sqlite option.*journal"):
        app.key_value_store("a", 1, engine="sqlite", config={"journal": "wal"})
    with pytest.raises(ValueError, match="sync_commits"):
        app.key_value_store("b", 1, engine="sqlite", config={"sync_commits": "full"})
    app.key_value_store("c", 1, engine="sqlite", config={"sync_commits": True})


def test_a_damaged_value_is_refused_not_served(tmp_path: Path) -> None:
    """SQLite keeps no checksums of its pages: a value whose bytes changed was served."""
    filled(tmp_path, 2000)
    path = database_file(tmp_path)
    content = path.read_bytes()
    at = content.index(b"%100d" % 1234) + 99  # the last digit of key 1234's value
    with path.open("r+b") as handle:
        handle.seek(at)
        handle.write(b"5")  # now it reads as key 1235's value
    store = open_store(tmp_path)
    try:
        with pytest.raises(CorruptStateError, match="damaged record"):
            store.get(b"key-001234")
        with pytest.raises(CorruptStateError, match="damaged record"):
            list(store.range(b"key-001200", b"key-001300"))
        assert store.get(b"key-001235") == b"%100d" % 1235
    finally:
        store.close()


def write_before_checksums(tmp_path: Path, rows: int = 0) -> None:
    """A store's database as iqstate wrote it before values carried checksums: key `k`,
    and `rows` more."""
    path = tmp_path / "s" / "0" / "sqlite"
    path.mkdir(parents=True)
    with sqlite3.connect(path / "store.db") as raw:
        raw.execute("CREATE TABLE data (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
        raw.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
        raw.execute("INSERT INTO data VALUES (?, ?)", (b"k", b"v"))
        raw.executemany(
            "INSERT INTO data VALUES (?, ?)", [(b"r%06d" % i, b"v") for i in range(rows)]
        )
        raw.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [
                ("status", b"\x00"),
                ("position", encode_position(Position.from_map({"src": {0: 3}}))),
                (f"offset:{TP}", encode_offset(7)),
            ],
        )


def test_a_database_written_before_checksums_is_sealed_when_first_opened(tmp_path: Path) -> None:
    write_before_checksums(tmp_path)
    for _ in range(2):
        store = open_store(tmp_path)
        assert store.get(b"k") == b"v" and store.committed_offset(TP) == 7
        assert store.position == Position.from_map({"src": {0: 3}})
        store.close()


def test_a_full_disk_while_sealing_an_old_database_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite rolls a full disk's transaction back by itself: the ROLLBACK after it must
    not replace the full disk with an error that reads as damage (the runtime would set
    the files aside)."""
    import iqstate_sqlite.store

    write_before_checksums(tmp_path, rows=20_000)
    open_database = iqstate_sqlite.store.open_database

    def no_room(path: Path, *, sync: bool) -> sqlite3.Connection:
        db = open_database(path, sync=sync)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count={pages}")  # the database cannot grow: SQLITE_FULL
        return db

    monkeypatch.setattr(iqstate_sqlite.store, "open_database", no_room)
    with pytest.raises(StateStorageError, match="the disk is full"):
        open_store(tmp_path)
    monkeypatch.undo()
    store = open_store(tmp_path)  # room again: sealed, nothing lost
    assert store.get(b"k") == b"v" and store.get(b"r019999") == b"v"
    assert store.committed_offset(TP) == 7
    store.close()


def test_a_lost_format_marker_is_refused_not_sealed_twice(tmp_path: Path) -> None:
    filled(tmp_path, 10)
    with sqlite3.connect(database_file(tmp_path)) as raw:
        raw.execute("DELETE FROM meta WHERE name = 'format'")
    with pytest.raises(CorruptStateError, match="record format"):
        open_store(tmp_path)
