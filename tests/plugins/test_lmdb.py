"""The LMDB engine: conformance, status marker, map growth, locking, migration."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from iqstate_lmdb import LMDB_ENGINE, LMDBKeyValueStore

from iqstate import Position, StateDirectoryLockedError, TopicPartition
from iqstate.persistent import UncleanShutdownError
from iqstate.runtime.offsets import CHECKPOINT_FILE, POSITION_FILE, write_offsets_file
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory, make_context

TP = TopicPartition("app-s-changelog", 0)


class TestLMDBConformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(LMDB_ENGINE)

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, LMDBKeyValueStore)
        store.abandon()


def open_store(root: Path, guarantee: str = "exactly_once", **config: object) -> LMDBKeyValueStore:
    store = LMDBKeyValueStore("s")
    store.init(make_context(root, "s", processing_guarantee=guarantee, config=config))  # type: ignore[arg-type]
    return store


def test_map_grows_instead_of_failing(tmp_path: Path) -> None:
    store = open_store(tmp_path, initial_map_mb=1)
    before = store.map_size()
    for batch in range(8):
        # A read before each commit leaves a reused read transaction open; the map must
        # still grow (LMDB resizes only with no transaction open).
        assert store.get(b"%d-0" % (batch - 1)) == (b"x" * 1000 if batch else None)
        store.put_all([(b"%d-%d" % (batch, i), b"x" * 1000) for i in range(1000)])
        store.commit({TP: batch})
    assert store.map_size() > before
    assert store.approximate_num_entries() == 8000
    store.close()
    reopened = open_store(tmp_path)
    assert reopened.get(b"7-999") == b"x" * 1000 and reopened.committed_offset(TP) == 7
    reopened.close()


def test_reads_see_each_commit_and_threads_read_alongside(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    seen: list[int] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            value = store.get(b"counter")
            seen.append(-1 if value is None else int(value))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for number in range(300):
            store.put(b"counter", b"%d" % number)
            store.commit({TP: number})
            assert store.get(b"counter") == b"%d" % number, "a read after a commit sees it"
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert set(seen) <= set(range(-1, 300)), "every read saw a committed value"
    assert store.get(b"counter") == b"299"
    store.close()


def test_unclean_shutdown_and_locking(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(StateDirectoryLockedError):
        open_store(tmp_path)
    store.put(b"k", b"v")
    store.commit({TP: 1})
    store.abandon()
    with pytest.raises(UncleanShutdownError):
        open_store(tmp_path)
    relaxed = open_store(tmp_path, "at_least_once")
    assert relaxed.get(b"k") == b"v"
    relaxed.close()


def test_legacy_files_are_migrated(tmp_path: Path) -> None:
    directory = tmp_path / "s" / "0"
    directory.mkdir(parents=True)
    write_offsets_file(directory / CHECKPOINT_FILE, {TP: 5})
    write_offsets_file(directory / POSITION_FILE, {TopicPartition("src", 1): 2})
    store = open_store(tmp_path)
    assert store.committed_offset(TP) == 5 and store.position == Position.from_map({"src": {1: 2}})
    assert not (directory / CHECKPOINT_FILE).exists()
    store.close()


def test_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown lmdb option"):
        open_store(tmp_path, map_mb=5)
