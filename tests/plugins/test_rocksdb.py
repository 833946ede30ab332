"""The RocksDB engine: conformance, crashes, locking, damage, migration, fsync, options."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from iqstate_rocksdb import ROCKSDB_ENGINE, RocksDBKeyValueStore
from iqstate_rocksdb.options import RocksDBSettings
from rocksdict import Options, Rdict, WriteBatch
from support.engine_stores import opened

from iqstate import (
    Application,
    ClosedStoreError,
    CorruptStateError,
    FailureReason,
    KeyQuery,
    Position,
    QueryableStoreTypes,
    RangeQuery,
    StateDirectoryLockedError,
    StateQueryRequest,
    StoreQueryParameters,
    TopicPartition,
)
from iqstate.context import ProcessingGuarantee
from iqstate.runtime.offsets import CHECKPOINT_FILE, POSITION_FILE, write_offsets_file
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory, make_context
from iqstate.versioned_store import LayeredVersionedStore

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
    root: Path,
    guarantee: ProcessingGuarantee = "exactly_once",
    *,
    sync: bool = False,
    **config: object,
) -> RocksDBKeyValueStore:
    return opened(RocksDBKeyValueStore("s"), root, guarantee, sync=sync, **config)


def database(root: Path) -> Path:
    return root / "s" / "0" / "rocksdb"


def filled(root: Path, keys: int = 20_000) -> None:
    """A closed store with `keys` keys of 100 random bytes, committed at offset 7."""
    rng = random.Random(3)
    store = open_store(root)
    store.put_all([(b"key-%06d" % i, rng.randbytes(100)) for i in range(keys)])
    store.commit({TP: 7})
    store.close()


def overwrite(path: Path, fraction: float, length: int = 64) -> None:
    with path.open("r+b") as handle:
        handle.seek(int(path.stat().st_size * fraction))
        handle.write(random.Random(path.name).randbytes(length))


def table_files(root: Path) -> list[Path]:
    """The database's table files, smallest (the offsets column family's) first."""
    return sorted(database(root).glob("*.sst"), key=lambda table: table.stat().st_size)


def test_a_crashed_store_reopens_with_its_last_commit_under_either_guarantee(
    tmp_path: Path,
) -> None:
    for guarantee in ("exactly_once", "at_least_once"):
        store = open_store(tmp_path, guarantee)
        store.put(b"k", guarantee.encode())
        store.commit({TP: 3})
        store.put(b"uncommitted", b"x")
        store.abandon()
        reopened = open_store(tmp_path, guarantee)
        assert reopened.get(b"k") == guarantee.encode() and reopened.committed_offset(TP) == 3
        assert reopened.get(b"uncommitted") is None
        reopened.close()


def test_a_second_handle_gets_a_lock_error_naming_the_path(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        with pytest.raises(StateDirectoryLockedError, match="rocksdb"):
            open_store(tmp_path)
    finally:
        store.close()


def test_corrupt_manifest_is_a_clear_error(tmp_path: Path) -> None:
    filled(tmp_path, 2000)
    for manifest in database(tmp_path).glob("MANIFEST-*"):
        manifest.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CorruptStateError, match="cannot be read"):
        open_store(tmp_path)


def test_a_checksum_mismatch_at_open_is_corruption_not_a_lock(tmp_path: Path) -> None:
    """ "block checksum mismatch" contains "lock": it was reported as a locked directory."""
    filled(tmp_path, 2000)
    offsets_table = table_files(tmp_path)[0]
    overwrite(offsets_table, 0.1)
    with pytest.raises(CorruptStateError) as raised:
        open_store(tmp_path)
    message = str(raised.value)
    assert "block checksum mismatch" in message and offsets_table.name in message
    assert str(database(tmp_path)) in message and "backup" in message


def test_a_deleted_manifest_is_a_clear_error_naming_the_database(tmp_path: Path) -> None:
    filled(tmp_path, 2000)
    for manifest in database(tmp_path).glob("MANIFEST-*"):
        manifest.unlink()
    with pytest.raises(CorruptStateError, match=f"{database(tmp_path)} cannot be read.*MANIFEST"):
        open_store(tmp_path)


def test_a_database_without_current_is_refused_not_recreated_empty(tmp_path: Path) -> None:
    filled(tmp_path, 2000)
    (database(tmp_path) / "CURRENT").unlink()
    with pytest.raises(CorruptStateError, match="CURRENT"):
        open_store(tmp_path)
    assert table_files(tmp_path), "the table files are kept"


def test_a_truncated_manifest_is_refused_before_rocksdb_deletes_the_tables(tmp_path: Path) -> None:
    """RocksDB would open the older version and delete the tables it no longer references."""
    filled(tmp_path, 2000)
    tables = {table.name: table.stat().st_size for table in table_files(tmp_path)}
    for manifest in database(tmp_path).glob("MANIFEST-*"):
        with manifest.open("r+b") as handle:
            handle.truncate(manifest.stat().st_size // 2)
    with pytest.raises(CorruptStateError, match="status marker|does not reference"):
        open_store(tmp_path)
    assert {table.name: table.stat().st_size for table in table_files(tmp_path)} == tables


def damaged_app(root: Path) -> tuple[Application, Path]:
    """An application whose rocksdb store's data table has a damaged block in its middle."""
    app = Application("app", root)
    app.key_value_store("s", 1, engine="rocksdb", value_serde="string")
    with app:
        with app.begin_batch(batch_id=0) as batch:
            batch.put_all("s", [(f"key-{i:06d}", "v" * 100) for i in range(20_000)])
    data_table = max((root / "app").rglob("*.sst"), key=lambda table: table.stat().st_size)
    overwrite(data_table, 0.5)
    app = Application("app", root)
    app.key_value_store("s", 1, engine="rocksdb", value_serde="string")
    app.start()
    return app, data_table


def test_a_range_over_a_damaged_block_fails_the_partition_instead_of_stopping_short(
    tmp_path: Path,
) -> None:
    app, data_table = damaged_app(tmp_path)
    try:
        everything = RangeQuery.with_no_bounds()
        # Bounded by keys that exist on both sides of the damage: the read stops at the
        # damage, short of the bound, and must not be taken for the whole range.
        bounded = RangeQuery.with_range("key-000000", "key-019999")
        for query in (
            everything,
            RangeQuery.with_no_bounds().with_descending_keys(),
            bounded,
            bounded.with_descending_keys(),
        ):
            result = app.query(StateQueryRequest.in_store("s").with_query(query))
            answer = result.partition_results[0]
            assert answer.is_failure and answer.failure_reason is FailureReason.STORE_EXCEPTION
            assert "CorruptStateError" in answer.failure_message
            assert data_table.name in answer.failure_message
        before_damage = RangeQuery.with_range("key-000000", "key-000099")
        for query in (before_damage, before_damage.with_descending_keys()):
            answer = app.query(StateQueryRequest.in_store("s").with_query(query)).partition_results[
                0
            ]
            with answer.result as pairs:
                assert len(list(pairs)) == 100, "a range ending at its bound before the damage"
        first_key = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("key-000000"))
        first = app.query(first_key)
        assert first.only_partition_result().result == "v" * 100, "undamaged blocks still answer"
    finally:
        app.close()


def test_iqv1_iteration_over_a_damaged_block_raises(tmp_path: Path) -> None:
    app, data_table = damaged_app(tmp_path)
    try:
        store = app.store(
            StoreQueryParameters.from_name_and_type("s", QueryableStoreTypes.key_value_store())
        )
        with pytest.raises(CorruptStateError, match=data_table.name):
            with store.all() as pairs:
                list(pairs)
        with pytest.raises(CorruptStateError, match=data_table.name):
            with store.range("key-000000", "key-019999") as pairs:
                list(pairs)
    finally:
        app.close()


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


@pytest.mark.parametrize("left", [(CHECKPOINT_FILE, POSITION_FILE), (POSITION_FILE,)])
def test_a_migration_cut_short_keeps_the_offsets_it_committed(
    tmp_path: Path, left: tuple[str, ...]
) -> None:
    """A crash after the migration's commit, before or between the unlinks of the legacy
    files: reopening migrates what is left, never clearing the offsets (and the fence)
    committed from them."""
    directory = tmp_path / "s" / "0"
    directory.mkdir(parents=True)
    fence = TopicPartition("app-s-fence", 0)
    legacy = {CHECKPOINT_FILE: {TP: 41, fence: 7}, POSITION_FILE: {TopicPartition("src", 0): 9}}
    for name, offsets in legacy.items():
        write_offsets_file(directory / name, offsets)
    store = open_store(tmp_path)
    store.put(b"k", b"v")
    store.commit({TP: 41, fence: 7})
    store.close()
    for name, offsets in legacy.items():  # what the crash left
        if name in left:
            write_offsets_file(directory / name, offsets)
    reopened = open_store(tmp_path)
    assert reopened.committed_offset(TP) == 41 and reopened.committed_offset(fence) == 7
    assert reopened.position == Position.from_map({"src": {0: 9}})
    assert reopened.get(b"k") == b"v"
    assert not any((directory / name).exists() for name in legacy)
    reopened.close()


def test_options_are_validated_when_the_store_is_declared(tmp_path: Path) -> None:
    app = Application("app", tmp_path)
    with pytest.raises(ValueError, match="unknown rocksdb option.*block_cache"):
        app.key_value_store("a", 1, engine="rocksdb", config={"block_cache": 5})
    with pytest.raises(ValueError, match="compression"):
        app.key_value_store("b", 1, engine="rocksdb", config={"compression": "brotli"})
    with pytest.raises(ValueError, match="sync_commits"):
        app.key_value_store("c", 1, engine="rocksdb", config={"sync_commits": "yes"})
    tuned = open_store(tmp_path, block_cache_mb=8, compression="zstd", sync_commits=True)
    tuned.put(b"k", b"v")
    tuned.commit({})
    assert tuned.get(b"k") == b"v"
    tuned.close()


def test_bad_option_values_are_refused_naming_the_option(tmp_path: Path) -> None:
    app = Application("app", tmp_path)
    bad = [
        ({"cache_index_and_filter_blocks": "yes"}, "cache_index_and_filter_blocks must be true"),
        ({"block_cache_mb": 0}, "block_cache_mb must be an int >= 1"),
        ({"block_cache_mb": "256"}, "option block_cache_mb must be an int >= 1, got '256'"),
        ({"max_open_files": True}, "max_open_files must be an int >= 1"),
        ({"bloom_bits_per_key": -1}, "rocksdb option bloom_bits_per_key must be an int >= 0"),
    ]
    for number, (config, message) in enumerate(bad):
        with pytest.raises(ValueError, match=f"store 'b{number}': .*{message}"):
            app.key_value_store(f"b{number}", 1, engine="rocksdb", config=config)


def block_cache_events(options: Options) -> dict[str, int]:
    """RocksDB's block cache counters (`rocksdb.block.cache.<name>`) of `options`' database."""
    counts = {}
    for line in (options.get_statistics() or "").splitlines():
        name, _, count = line.partition(" COUNT : ")
        if name.startswith("rocksdb.block.cache.") and count:
            counts[name.removeprefix("rocksdb.block.cache.")] = int(count)
    return counts


@pytest.mark.parametrize("in_cache", [False, True])
def test_gets_do_not_reread_filter_blocks_even_when_a_whole_filter_outgrows_a_cache_shard(
    tmp_path: Path, in_cache: bool
) -> None:
    """The cause of 70-210 us gets (issue 13): a 64 MB LRU cache has 64 shards of 1 MB, a
    million keys' filter is 1.2 MB, so it was never kept and every get read it again.
    Here an 8 MB cache against 600,000 keys (a 730 KB filter, larger than a shard of an 8 MB
    LRU cache): the old table options missed the filter at every one of these gets."""
    settings = RocksDBSettings(block_cache_mb=8, cache_index_and_filter_blocks=in_cache)
    options = settings.db_options(create=True)
    options.enable_statistics()
    db = Rdict(str(tmp_path / "db"), options=options, column_families={})
    try:
        rng = random.Random(1)
        keys = [b"%016x" % rng.getrandbits(64) for _ in range(600_000)]
        for start in range(0, len(keys), 50_000):
            batch = WriteBatch(raw_mode=True)
            for key in keys[start : start + 50_000]:
                batch.put(key, key * 6)
            db.write(batch)
        db.flush()
        db.compact_range(None, None)
        lookups = [rng.choice(keys) for _ in range(3_000)]
        assert all(db.get(key) == key * 6 for key in lookups)  # warm
        before = block_cache_events(options)
        assert all(db.get(key) == key * 6 for key in lookups)
        after = block_cache_events(options)
        filter_misses = after.get("filter.miss", 0) - before.get("filter.miss", 0)
        index_misses = after.get("index.miss", 0) - before.get("index.miss", 0)
        assert filter_misses + index_misses < len(lookups) / 20
    finally:
        db.close()


def test_settling_flushes_the_memtables_and_keeps_every_commit(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    entries = [(b"key-%05d" % i, b"value-%05d" % i) for i in range(2_000)]
    store.put_all(entries)
    store.update_position(Position.from_map({"source": {0: 9}}))
    store.commit({TP: 2_000})
    assert store.memtable_entries >= len(entries)
    store.settle()
    deadline = time.monotonic() + 30
    while store.memtable_entries and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.memtable_entries == 0, "the memtables were flushed to table files"
    assert table_files(tmp_path), "the data is in table files"
    assert all(store.get(key) == value for key, value in entries)
    store.put(b"key-00000", b"after")
    store.commit({TP: 2_001})
    store.abandon()  # a crash after settling loses nothing committed
    reopened = open_store(tmp_path)
    assert reopened.get(b"key-00000") == b"after" and reopened.get(b"key-01999") == b"value-01999"
    assert reopened.committed_offset(TP) == 2_001
    assert reopened.position == Position.from_map({"source": {0: 9}})
    reopened.close()
    reopened.settle()  # closed: nothing to do, no error
    assert reopened.memtable_entries == 0


def test_store_types_kept_in_a_rocksdb_store_settle_it(tmp_path: Path) -> None:
    """Versioned, session and window stores keep their data in the engine's key-value
    store: settling one flushes that store's memtables."""
    versioned = LayeredVersionedStore(RocksDBKeyValueStore("s"), 1_000)
    versioned.init(make_context(tmp_path, "s"))
    inner = versioned.key_value_store
    assert isinstance(inner, RocksDBKeyValueStore)
    versioned.put(b"k", b"v", 10)
    versioned.commit({TP: 1})
    assert inner.memtable_entries > 0
    versioned.settle()
    deadline = time.monotonic() + 30
    while inner.memtable_entries and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inner.memtable_entries == 0
    assert versioned.get(b"k") is not None
    versioned.close()


class _Handle:
    """A RocksDB handle that runs `before_get` (once) at the start of its next `get`."""

    def __init__(self, db: Rdict) -> None:
        self.db = db
        self.before_get: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def get(self, key: bytes) -> Any:
        hook, self.before_get = self.before_get, None
        if hook is not None:
            hook()
        return self.db.get(key)


def test_a_read_whose_handle_was_closed_and_opened_again_meanwhile_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread closes the store object and opens it again while a read is on the old
    handle: the read fails as a read of a closed store (the caller asks again), never as
    damage, which would set the partition's files aside for a rebuild."""
    import iqstate_rocksdb.store as rocksdb_store

    handles: list[_Handle] = []
    real_open = rocksdb_store.open_database

    def opening(*args: Any, **kwargs: Any) -> _Handle:
        handles.append(_Handle(real_open(*args, **kwargs)))
        return handles[-1]

    monkeypatch.setattr(rocksdb_store, "open_database", opening)
    store = RocksDBKeyValueStore("s")
    store.init(make_context(tmp_path, "s"))
    store.put_all([(b"k", b"v")])
    store.commit({TopicPartition("t", 0): 1})

    def close_and_open_again() -> None:
        store.close()
        store.init(make_context(tmp_path, "s"))

    handles[-1].before_get = close_and_open_again
    with pytest.raises(ClosedStoreError):
        store.get(b"k")
    assert store.get(b"k") == b"v", "the store opened again reads its data"
    store.close()
