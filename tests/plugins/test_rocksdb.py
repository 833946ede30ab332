"""The RocksDB engine: conformance, status marker, locking, corruption, migration, options."""

from __future__ import annotations

from pathlib import Path

import pytest
from iqstate_rocksdb import ROCKSDB_ENGINE, RocksDBKeyValueStore

from iqstate import CorruptStateError, Position, StateDirectoryLockedError, TopicPartition
from iqstate.persistent import UncleanShutdownError
from iqstate.runtime.offsets import CHECKPOINT_FILE, POSITION_FILE, write_offsets_file
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory, make_context

TP = TopicPartition("app-s-changelog", 0)


class TestRocksDBConformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(ROCKSDB_ENGINE)

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, RocksDBKeyValueStore)
        store.abandon()


def open_store(
    root: Path, guarantee: str = "exactly_once", **config: object
) -> RocksDBKeyValueStore:
    store = RocksDBKeyValueStore("s")
    store.init(make_context(root, "s", processing_guarantee=guarantee, config=config))  # type: ignore[arg-type]
    return store


def test_unclean_shutdown_under_exactly_once_asks_for_a_rebuild(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.put(b"k", b"v")
    store.commit({TP: 3})
    store.abandon()
    with pytest.raises(UncleanShutdownError, match="not closed cleanly"):
        open_store(tmp_path)
    relaxed = open_store(tmp_path, "at_least_once")
    assert relaxed.get(b"k") == b"v" and relaxed.committed_offset(TP) == 3
    relaxed.close()
    clean = open_store(tmp_path)
    assert clean.get(b"k") == b"v"
    clean.close()


def test_a_second_handle_gets_a_lock_error_naming_the_path(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        with pytest.raises(StateDirectoryLockedError, match="rocksdb"):
            open_store(tmp_path)
    finally:
        store.close()


def test_corrupt_database_is_a_clear_error(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.put_all([(b"k%d" % i, b"v" * 100) for i in range(2000)])
    store.commit({TP: 1})
    store.close()
    database = tmp_path / "s" / "0" / "rocksdb"
    for manifest in database.glob("MANIFEST-*"):
        manifest.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CorruptStateError, match="is corrupt"):
        open_store(tmp_path)


def test_legacy_files_are_migrated_and_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "s" / "0"
    directory.mkdir(parents=True)
    write_offsets_file(directory / CHECKPOINT_FILE, {TP: 41})
    write_offsets_file(directory / POSITION_FILE, {TopicPartition("src", 0): 9})
    store = open_store(tmp_path)
    assert store.committed_offset(TP) == 41
    assert store.position == Position.from_map({"src": {0: 9}})
    assert not (directory / CHECKPOINT_FILE).exists() and not (directory / POSITION_FILE).exists()
    store.close()
    reopened = open_store(tmp_path)
    assert reopened.committed_offset(TP) == 41 and reopened.stored_position() == reopened.position
    reopened.close()


def test_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown rocksdb option"):
        open_store(tmp_path, block_cache=5)
    with pytest.raises(ValueError, match="compression"):
        open_store(tmp_path, compression="brotli")
    tuned = open_store(tmp_path, block_cache_mb=8, compression="zstd", sync_commits=True)
    tuned.put(b"k", b"v")
    tuned.commit({})
    assert tuned.get(b"k") == b"v"
    tuned.close()
