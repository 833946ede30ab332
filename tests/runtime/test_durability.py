"""What the runtime does with state it cannot trust: crashes, vanished partitions, gaps.

SPEC section 4: committed data is never thrown away and nothing lost is served as success.
A store with atomic commits is used as it is after a crash; one without them is rebuilt
from a readable changelog (its files moved aside) or refused; a partition whose files
vanished is rebuilt or refused; a batch that skips batches on a partition is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from iqstate_rocksdb import RocksDBKeyValueStore

from iqstate import (
    Application,
    AppState,
    BatchGapError,
    CorruptStateError,
    Engine,
    InMemoryChangelog,
    KeyQuery,
    LostStateError,
    PluginError,
    Position,
    RangeQuery,
    StateQueryRequest,
)
from iqstate.context import StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.hookspecs import hookimpl
from iqstate.plugins import PluginRegistry, make_plugin_manager
from iqstate.runtime.committed import RECORD_FILE
from iqstate.store_handlers import key_value_handlers
from iqstate.testing import make_context

KEYS = [f"key-{i}" for i in range(30)]


class NonAtomicRocksDB(RocksDBKeyValueStore):
    """RocksDB claiming no atomic commits, as a third-party engine might."""

    kind = "nonatomic.key_value"
    atomic_commits = False


class ContextRecordingStore(MemoryKeyValueStore):
    """A memory store remembering the context the runtime gave it."""

    kind = "recording.key_value"
    contexts: list[StateStoreContext] = []

    def init(self, context: StateStoreContext) -> None:
        ContextRecordingStore.contexts.append(context)
        super().init(context)


def refuse_store_names(name: str) -> MemoryKeyValueStore:
    raise ValueError(f"store names may not be {name!r} here")


class TestEngines:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine("nonatomic", NonAtomicRocksDB, persistent=True))
        register(Engine("recording", ContextRecordingStore))
        register(Engine("claims-persistence", MemoryKeyValueStore, persistent=True))
        register(Engine("picky", refuse_store_names))

    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        for kind in (NonAtomicRocksDB.kind, ContextRecordingStore.kind):
            for query_type, handler in key_value_handlers().items():
                register(query_type, kind, handler)


def registry() -> PluginRegistry:
    manager = make_plugin_manager(extra_plugins=[("durability-test", TestEngines())])
    return PluginRegistry.from_plugin_manager(manager)


def make_app(
    root: Path,
    engine: str,
    changelog: InMemoryChangelog | None = None,
    guarantee: str = "exactly_once",
) -> Application:
    app = Application(
        "app",
        root,
        processing_guarantee=guarantee,  # type: ignore[arg-type]
        plugins=registry(),
        changelog=changelog,
    )
    app.key_value_store("s", 3, engine=engine, value_serde="int64", logging=changelog is not None)
    return app


def write(app: Application, batch_id: int, value: int, **options: Any) -> None:
    with app.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id, **options) as batch:
        batch.put_all("s", [(key, value) for key in KEYS])


def contents(app: Application) -> dict[str, int]:
    result = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
    pairs: dict[str, int] = {}
    for answer in result.partition_results.values():
        pairs.update(answer.result)
    return pairs


def crash(root: Path, partition: int = 0) -> None:
    """Leave a closed store partition as a killed process would: marked open."""
    store = NonAtomicRocksDB("s")
    store.init(make_context(root / "app", "s", partition, processing_guarantee="at_least_once"))
    store.abandon()


# -- item 1: stores that cannot promise atomic commits ------------------------------------


def test_crashed_store_without_atomic_commits_and_changelog_refuses_to_start(
    tmp_path: Path,
) -> None:
    with make_app(tmp_path, "nonatomic") as app:
        write(app, 1, 10)
    crash(tmp_path)
    app = make_app(tmp_path, "nonatomic")
    with pytest.raises(LostStateError) as refused:
        app.start()
    message = str(refused.value)
    assert "'s'" in message and "partition 0" in message
    assert "at_least_once" in message and str(tmp_path / "app" / "s" / "0") in message
    assert app.state is AppState.ERROR
    assert (tmp_path / "app" / "s" / "0" / "rocksdb").is_dir(), "nothing was deleted"

    with make_app(tmp_path, "nonatomic", guarantee="at_least_once") as relaxed:
        assert contents(relaxed) == dict.fromkeys(KEYS, 10), "at-least-once uses it as is"


def test_crashed_store_without_atomic_commits_is_rebuilt_from_its_changelog(
    tmp_path: Path,
) -> None:
    changelog = InMemoryChangelog()
    with make_app(tmp_path, "nonatomic", changelog) as app:
        write(app, 1, 10)
        write(app, 2, 20)
    crash(tmp_path, partition=1)
    with make_app(tmp_path, "nonatomic", changelog) as app:
        assert contents(app) == dict.fromkeys(KEYS, 20)
        lags = app.all_local_store_partition_lags()["s"]
        assert lags[1].rebuilt and not lags[0].rebuilt and not lags[2].rebuilt
        assert lags[1].current_offset_position == lags[1].end_offset_position
        write(app, 3, 30)
        assert contents(app) == dict.fromkeys(KEYS, 30)
    aside = [p.name for p in (tmp_path / "app" / "s").iterdir() if ".untrusted-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("1."), "the old files were moved, not deleted"


@pytest.mark.parametrize("lost", ["crashed", "vanished"])
def test_a_partition_its_fresh_in_memory_changelog_cannot_rebuild_is_refused(
    tmp_path: Path, lost: str
) -> None:
    """A new process's `InMemoryChangelog` is empty: a partition that committed data and
    must be rebuilt is refused, never started empty; untrusted files stay set aside."""
    engine = "nonatomic" if lost == "crashed" else "rocksdb"
    with make_app(tmp_path, engine, InMemoryChangelog()) as app:
        write(app, 1, 10)
    if lost == "crashed":
        crash(tmp_path, partition=1)
    else:
        shutil.rmtree(tmp_path / "app" / "s" / "1")
    app = make_app(tmp_path, engine, InMemoryChangelog())
    with pytest.raises(LostStateError, match="'s' partition 1 must be rebuilt") as refused:
        app.start()
    assert "InMemoryChangelog starts empty" in str(refused.value)
    aside = [p for p in (tmp_path / "app" / "s").iterdir() if ".untrusted-" in p.name]
    if lost == "crashed":
        assert len(aside) == 1 and str(aside[0]) in str(refused.value)
        assert any(aside[0].iterdir()), "the committed files are kept, moved aside"
    else:
        assert aside == []


def test_a_partition_a_durable_changelog_holds_nothing_of_is_rebuilt_empty(
    tmp_path: Path,
) -> None:
    """Only a changelog that does not outlive the process is suspect when it holds none of
    a partition's records: a durable one holding none is the partition's truth (it only
    ever took batches' fences), and the partition starts from it, empty."""
    changelog = _DurableChangelog()
    with make_app(tmp_path, "rocksdb", changelog) as app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put("s", "only-key", 1)  # the other partitions take the fence only
        assert contents(app) == {"only-key": 1}
        request = StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds())
        answers = app.query(request).partition_results
        empty = next(p for p, answer in answers.items() if not list(answer.result))
    shutil.rmtree(tmp_path / "app" / "s" / str(empty))
    with make_app(tmp_path, "rocksdb", changelog) as app:
        assert contents(app) == {"only-key": 1}
        assert app.all_local_store_partition_lags()["s"][empty].rebuilt


# -- item 3: partitions that lost their files -----------------------------------------------


def test_an_engine_whose_persistence_flag_its_stores_contradict_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """An engine registered as persistent over an in-memory store would keep nothing on
    disk while the runtime records committed partitions: the next start would report the
    files deleted. The mismatch is refused at start, naming the engine and its store."""
    app = make_app(tmp_path, "claims-persistence")
    claim = "engine 'claims-persistence' of plugin 'durability-test' is registered with "
    contradiction = (
        "persistent=True, but its store memory.key_value store 's' says persistent=False"
    )
    with pytest.raises(PluginError, match=claim + contradiction):
        app.start()
    assert app.state is AppState.ERROR


def test_an_engine_that_refuses_a_store_is_named_in_its_error(tmp_path: Path) -> None:
    app = make_app(tmp_path, "picky")
    with pytest.raises(ValueError, match="store names may not be 's' here") as refused:
        app.start()
    assert refused.value.__notes__ == [
        "store 's': engine 'picky' of plugin 'durability-test' refused to create it"
    ]


@pytest.mark.parametrize("engine", ["rocksdb", "lmdb", "sqlite"])
def test_partition_whose_directory_vanished_is_refused(tmp_path: Path, engine: str) -> None:
    with make_app(tmp_path, engine) as app:
        write(app, 1, 10)
    shutil.rmtree(tmp_path / "app" / "s" / "2")
    app = make_app(tmp_path, engine)
    with pytest.raises(LostStateError) as refused:
        app.start()
    record = tmp_path / "app" / "s" / RECORD_FILE
    assert "'s' partition 2" in str(refused.value) and str(record) in str(refused.value)

    # The remedy the message names: accept the loss for that partition.
    listed = json.loads(record.read_text())["partitions"]
    record.write_text(json.dumps({"partitions": [p for p in listed if p != 2]}))
    with make_app(tmp_path, engine) as app:
        survivors = contents(app)
        assert survivors and set(survivors.values()) == {10}
        assert len(survivors) < len(KEYS), "partition 2 restarted empty, as accepted"


@pytest.mark.parametrize("engine", ["rocksdb", "lmdb"])
def test_partition_whose_data_vanished_is_rebuilt_from_its_changelog(
    tmp_path: Path, engine: str
) -> None:
    changelog = InMemoryChangelog()
    with make_app(tmp_path, engine, changelog) as app:
        write(app, 1, 10)
    shutil.rmtree(tmp_path / "app" / "s" / "0")
    with make_app(tmp_path, engine, changelog) as app:
        assert contents(app) == dict.fromkeys(KEYS, 10)
        lags = app.all_local_store_partition_lags()["s"]
        assert lags[0].rebuilt and not lags[1].rebuilt
        result = app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("key-0")))
        assert result.position == Position.from_map({"src": {0: 1}})


def test_memory_store_with_changelog_restores_in_the_same_process(tmp_path: Path) -> None:
    changelog = InMemoryChangelog()
    with make_app(tmp_path, "memory", changelog) as app:
        write(app, 1, 10)
    with make_app(tmp_path, "memory", changelog) as app:
        assert contents(app) == dict.fromkeys(KEYS, 10)


# -- item 3: gaps between a partition's fence and a batch -----------------------------------


def test_batch_skipping_batches_on_a_partition_is_refused(tmp_path: Path) -> None:
    with make_app(tmp_path, "rocksdb") as app:
        write(app, 1, 10)
        write(app, 2, 20)
        with pytest.raises(BatchGapError) as refused:
            write(app, 5, 50)
        message = str(refused.value)
        assert "'s' partition 0" in message and "missing 3..4" in message
        assert app.state is AppState.RUNNING
        assert contents(app) == dict.fromkeys(KEYS, 20), "nothing of the batch was written"
        write(app, 5, 50, allow_gaps=True)
        assert contents(app) == dict.fromkeys(KEYS, 50)


def test_a_store_that_lost_the_pipelines_earlier_batches_is_refused_its_next_one(
    tmp_path: Path,
) -> None:
    """A store in memory comes back empty after a restart while the pipeline (a Spark
    checkpoint) goes on from batch 6: given the pipeline's first batch id, the batch is
    refused, naming what is missing and why, instead of serving partial state at the
    position of batch 6; `allow_gaps` accepts it knowingly."""
    with make_app(tmp_path, "memory") as app:
        for batch_id in range(6):
            write(app, batch_id, batch_id, first_batch_id=0)
    with make_app(tmp_path, "memory") as app:
        with pytest.raises(BatchGapError) as refused:
            write(app, 6, 60, first_batch_id=0)
        message = str(refused.value)
        assert "'s' partition 0 (holding nothing, missing 0..5)" in message
        assert "a store in memory restarted" in message and "persistent engine" in message
        assert app.state is AppState.RUNNING
        assert contents(app) == {}, "nothing of the batch was written"
        write(app, 6, 60, first_batch_id=0, allow_gaps=True)
        write(app, 7, 70, first_batch_id=0)  # the store has a fence now
        assert contents(app) == dict.fromkeys(KEYS, 70)
    with make_app(tmp_path / "fresh", "memory") as app:
        write(app, 0, 0, first_batch_id=0)  # a pipeline's first batch on new stores
        write(app, 1, 1, first_batch_id=0)
        assert contents(app) == dict.fromkeys(KEYS, 1)
        with pytest.raises(ValueError, match="first_batch_id must be an int from 0 to batch_id"):
            app.begin_batch(position={"src": {0: 2}}, batch_id=2, first_batch_id=3)


@pytest.mark.parametrize("engine", ["memory", "rocksdb"])
def test_a_store_restored_from_its_changelog_takes_the_pipelines_next_batch(
    tmp_path: Path, engine: str
) -> None:
    """A partition restored from its changelog (a store in memory after a restart, a
    persistent one whose files vanished) holds the pipeline's earlier batches: the next
    one applies, although its fence was not restored."""
    changelog = InMemoryChangelog()
    with make_app(tmp_path, engine, changelog) as app:
        for batch_id in range(3):
            write(app, batch_id, batch_id, first_batch_id=0)
    if engine == "rocksdb":
        shutil.rmtree(tmp_path / "app" / "s" / "0")
    with make_app(tmp_path, engine, changelog) as app:
        assert contents(app) == dict.fromkeys(KEYS, 2)
        write(app, 3, 3, first_batch_id=0)
        assert contents(app) == dict.fromkeys(KEYS, 3)


def test_a_gap_on_partitions_behind_and_on_partitions_holding_nothing_names_each(
    tmp_path: Path,
) -> None:
    """A partition accepted as lost (`LostStateError`'s remedy) beside others at their
    fence: the refusal explains each kind, and does not tell the others to start over."""
    with make_app(tmp_path, "rocksdb") as app:
        for batch_id in range(3):
            write(app, batch_id, batch_id, first_batch_id=0)
    shutil.rmtree(tmp_path / "app" / "s" / "2")
    record = tmp_path / "app" / "s" / RECORD_FILE
    listed = json.loads(record.read_text())["partitions"]
    record.write_text(json.dumps({"partitions": [p for p in listed if p != 2]}))
    with make_app(tmp_path, "rocksdb") as app:
        with pytest.raises(BatchGapError) as refused:
            write(app, 5, 5, first_batch_id=0)
        message = str(refused.value)
        assert "'s' partition 0 (last batch 2, missing 3..4);" in message
        assert "'s' partition 1 (last batch 2, missing 3..4): rolled back or replaced" in message
        assert "'s' partition 2 (holding nothing, missing 0..4): lost what" in message
        assert message.endswith("Nothing was written")


def test_partition_rolled_back_to_an_old_copy_is_reported_at_the_next_batch(
    tmp_path: Path,
) -> None:
    with make_app(tmp_path, "rocksdb") as app:
        write(app, 1, 10)
    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / "app" / "s" / "1", backup)
    with make_app(tmp_path, "rocksdb") as app:
        write(app, 2, 20)
    shutil.rmtree(tmp_path / "app" / "s" / "1")
    shutil.copytree(backup, tmp_path / "app" / "s" / "1")
    with make_app(tmp_path, "rocksdb") as app:
        with pytest.raises(BatchGapError, match=r"'s' partition 1 \(last batch 1, missing 2\)"):
            write(app, 3, 30)
        write(app, 2, 20)  # replaying the missing batch heals the partition
        write(app, 3, 30)
        assert contents(app) == dict.fromkeys(KEYS, 30)


# -- item 2: durable commits under exactly-once without a changelog ----------------------


class _DurableChangelog(InMemoryChangelog):
    """Stands for a changelog that outlives the process (a Kafka topic's)."""

    durable = True


@pytest.mark.parametrize(
    ("guarantee", "changelog", "synced"),
    [
        ("exactly_once", None, True),
        ("exactly_once", _DurableChangelog, False),  # a crash is repaired from it
        ("exactly_once", InMemoryChangelog, True),  # gone with the process: no repair
        ("at_least_once", None, False),
    ],
)
def test_runtime_asks_for_fsynced_commits_where_the_store_is_the_only_copy(
    tmp_path: Path, guarantee: str, changelog: type[InMemoryChangelog] | None, synced: bool
) -> None:
    ContextRecordingStore.contexts.clear()
    with make_app(tmp_path, "recording", changelog and changelog(), guarantee):
        pass
    assert len(ContextRecordingStore.contexts) == 3
    assert all(context.sync_commits is synced for context in ContextRecordingStore.contexts)


# -- item 17: engine options are checked when the store is declared ------------------------


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb", "sqlite"])
def test_unknown_engine_option_fails_at_declaration(tmp_path: Path, engine: str) -> None:
    app = Application("app", tmp_path)
    with pytest.raises(ValueError, match="no_such_option"):
        app.key_value_store("s", 2, engine=engine, config={"no_such_option": 1})
    assert app.state is AppState.CREATED and "s" not in app.stores


@pytest.mark.parametrize("damage", [b"{not json", b'{"partitions": [1\xff]}', b'{"other": 1}'])
def test_a_damaged_record_of_committed_partitions_is_damage(tmp_path: Path, damage: bytes) -> None:
    with make_app(tmp_path, "lmdb") as app:
        write(app, 1, 10)
    (tmp_path / "app" / "s" / RECORD_FILE).write_bytes(damage)
    with pytest.raises(CorruptStateError, match=RECORD_FILE):
        make_app(tmp_path, "lmdb").start()
