"""Plugin loading: entry points, default plugins, blocking, conflicts and clear errors."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iqstate import (
    Application,
    Engine,
    FailureReason,
    KeyQuery,
    PluginError,
    Query,
    QueryResult,
    Serdes,
    StateQueryRequest,
    StateStoreContext,
    UnknownEngineError,
    WindowKeyQuery,
)
from iqstate.cli import describe_plugins
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.hookspecs import hookimpl
from iqstate.layers import build_key_value_chain
from iqstate.plugins import BLOCK_ENV, PluginRegistry, make_plugin_manager

FIXTURE = Path(__file__).parent.parent / "fixtures" / "iqstate-entry-count"


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pip-installs the fixture distribution into a private target on sys.path."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(FIXTURE),
        ],
        check=True,
    )
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    yield target
    sys.path.remove(str(target))
    sys.modules.pop("iqstate_entry_count", None)


def registry_of(**kwargs: Any) -> PluginRegistry:
    return PluginRegistry.from_plugin_manager(make_plugin_manager(**kwargs))


def memory_chain(registry: PluginRegistry) -> Any:
    store = build_key_value_chain(
        MemoryKeyValueStore("s"), Serdes.string(), Serdes.json(), caching=True
    )
    store.init(
        StateStoreContext(
            application_id="a", store_name="s", partition=0, query_handlers=registry.query_handlers
        )
    )
    return store


def test_defaults_are_registered_as_plugins() -> None:
    registry = registry_of(load_entry_points=False)
    assert {"memory", "builtins"} <= set(registry.plugin_names)
    assert registry.engine("memory").persistent is False
    assert registry.engine_owners["memory"] == "memory"
    assert registry.serde("int64") is Serdes.int64()
    assert registry.query_handlers.answered_by(KeyQuery) == [
        "KeyValueStore",  # every engine's key-value stores, the memory engine's included
        "VersionedKeyValueStore",  # the current value of a versioned store
        "caching.key_value",
        "metered.key_value",
        "metered.timestamped_key_value",  # the value without its timestamp
        "metered.versioned",
    ]


def test_installed_plugin_query_is_answered_by_an_unchanged_engine(installed_plugin: Path) -> None:
    registry = registry_of()
    assert "entry-count" in registry.plugin_names
    from iqstate_entry_count import EntryCountQuery  # type: ignore[import-not-found]

    store = memory_chain(registry)
    store.put_all([("a", 1), ("b", 2), ("c", 3)])
    store.commit({})
    result = store.query(EntryCountQuery())
    assert result.is_success and result.result == 3
    assert registry.query_handlers.owner("memory.key_value", EntryCountQuery) == "entry-count"

    without = memory_chain(registry_of(load_entry_points=False))
    assert without.query(EntryCountQuery()).failure_reason is FailureReason.UNKNOWN_QUERY_TYPE


def test_plugins_can_be_blocked_by_environment(
    installed_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "entry-count, memory")
    registry = registry_of()
    assert "entry-count" not in registry.plugin_names
    assert "memory" not in registry.engines, "a default plugin can be blocked too"
    with pytest.raises(UnknownEngineError, match="names engine 'memory'") as error:
        registry.engine("memory", store="counts")
    assert "memory" not in str(error.value).split("installed engines:")[1].split(".")[0]


def test_autoload_can_be_disabled(installed_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IQSTATE_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "entry-count" not in registry_of().plugin_names


def test_unknown_engine_error_lists_installed_engines() -> None:
    registry = registry_of(load_entry_points=False)
    with pytest.raises(UnknownEngineError) as error:
        registry.engine("cassandra", store="counts")
    message = str(error.value)
    assert "store 'counts'" in message and "'cassandra'" in message and "memory" in message
    assert "pip install iqstate-cassandra" in message


def test_a_misspelt_engine_is_pointed_at_the_installed_one() -> None:
    registry = registry_of(load_entry_points=False)
    with pytest.raises(UnknownEngineError, match="Did you mean 'memory'") as error:
        registry.engine("memroy", store="counts")
    assert "pip install" not in str(error.value)


class _DuplicateEngine:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine(name="memory", key_value_store=MemoryKeyValueStore))


def test_two_plugins_with_the_same_engine_name_conflict() -> None:
    with pytest.raises(PluginError) as error:
        registry_of(load_entry_points=False, extra_plugins=[("impostor", _DuplicateEngine())])
    assert "'memory'" in str(error.value) and "'impostor'" in str(error.value)


class _DuplicateHandler:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(KeyQuery, "metered.key_value", lambda *_: QueryResult.for_result(None))


def test_two_handlers_for_the_same_kind_and_query_conflict() -> None:
    with pytest.raises(PluginError, match="both register a handler for KeyQuery"):
        registry_of(load_entry_points=False, extra_plugins=[("shadow", _DuplicateHandler())])


class _BadRegistrations:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register("not an engine")


def test_malformed_registrations_are_refused() -> None:
    with pytest.raises(PluginError, match="'bad'"):
        registry_of(load_entry_points=False, extra_plugins=[("bad", _BadRegistrations())])

    class NotAQuery:
        pass

    registry = registry_of(load_entry_points=False)
    with pytest.raises(PluginError, match="not a Query"):
        registry.query_handlers.register(NotAQuery, "memory.key_value", print)  # type: ignore[arg-type]


class _CustomSerde:
    name = "upper"

    def serialize(self, value: str) -> bytes:
        return value.upper().encode()

    def deserialize(self, data: bytes) -> str:
        return data.decode()


class _SerdePlugin:
    @hookimpl
    def iqstate_register_serdes(self, register: Any) -> None:
        register("upper", _CustomSerde())


def test_custom_serdes_through_the_hook() -> None:
    registry = registry_of(load_entry_points=False, extra_plugins=[("serde", _SerdePlugin())])
    serde = registry.serde("upper")
    assert serde.serialize("abc") == b"ABC"
    with pytest.raises(PluginError, match="no serde named 'nope'"):
        registry.serde("nope", store="s")


def test_cli_lists_engines_and_query_types(installed_plugin: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed_plugin)}
    completed = subprocess.run(
        [sys.executable, "-m", "iqstate.cli", "plugins"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    out = completed.stdout
    assert "memory  (in-memory, from plugin memory)" in out
    assert "iqstate_entry_count.EntryCountQuery" in out and "<- entry-count" in out
    report = subprocess.run(
        [sys.executable, "-m", "iqstate.cli", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    data = json.loads(report)
    memory = next(e for e in data["engines"] if e["name"] == "memory")
    assert "EntryCountQuery" in memory["answers"] and "KeyQuery" in memory["answers"]
    # A handler reaches the kind it was registered for, not the engine's other stores.
    by_kind = memory["answers_by_kind"]
    assert "EntryCountQuery" in by_kind["memory.key_value"]
    assert "EntryCountQuery" not in by_kind["memory.window"] + by_kind["layered.versioned"]
    assert "memory.window: WindowKeyQuery, WindowRangeQuery" in out


def test_cli_output_read_in_part_ends_quietly() -> None:
    # `iqstate plugins | head -1`: the reader goes away before the listing ends.
    listing = subprocess.Popen(
        [sys.executable, "-m", "iqstate.cli", "plugins"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert listing.stdout is not None and listing.stderr is not None
    listing.stdout.close()
    assert listing.wait(60) == 0
    assert "Traceback" not in listing.stderr.read()


class _RecordingWrapper:
    """A hook wrapper around engine registration, as a tracing or policy plugin might be."""

    def __init__(self) -> None:
        self.wrapped: list[str] = []

    @hookimpl(wrapper=True)
    def iqstate_register_engines(self, register: Any) -> Any:
        self.wrapped.append("before")
        result = yield
        self.wrapped.append("after")
        return result


def test_registration_hooks_go_through_pluggy_so_wrappers_and_tracing_apply() -> None:
    wrapper = _RecordingWrapper()
    manager = make_plugin_manager(load_entry_points=False, extra_plugins=[("recorder", wrapper)])
    traced: list[str] = []
    undo = manager.add_hookcall_monitoring(
        lambda name, impls, kwargs: traced.append(name), lambda *_: None
    )
    try:
        registry = PluginRegistry.from_plugin_manager(manager)
    finally:
        undo()
    assert wrapper.wrapped == ["before", "after"]
    assert "iqstate_register_engines" in traced and "iqstate_register_serdes" in traced
    assert registry.engine_owners["memory"] == "memory", "registrations keep their plugin"
    assert registry.query_handlers.owner("metered.key_value", KeyQuery) == "builtins"


class _LazyEngine:
    """An engine named by import paths, as the RocksDB and LMDB plugins register theirs."""

    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(
            Engine(
                name="lazy-memory",
                key_value_store="iqstate.engines.memory:MemoryKeyValueStore",
                window_store="iqstate.engines.memory:MemoryWindowStore",
                check_config="iqstate.engines.memory:check_no_options",
            )
        )


def test_an_engine_registered_by_import_path_serves_stores(tmp_path: Path) -> None:
    registry = registry_of(load_entry_points=False, extra_plugins=[("lazy", _LazyEngine())])
    engine = registry.engine("lazy-memory")
    assert engine.plugin == "lazy" and engine.window_store is not None
    app = Application("lazy", tmp_path, plugins=registry)
    with pytest.raises(ValueError, match="the memory engine takes no options"):
        app.key_value_store("typo", 1, engine="lazy-memory", config={"block_size": 1})
    app.key_value_store("counts", 2, engine="lazy-memory", value_serde="int64")
    app.window_store("clicks", 1, 10, 100, engine="lazy-memory", value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put_all("counts", [("a", 1), ("b", 2)])
            batch.put("clicks", "a", 7, window_start=20)
        request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("b"))
        assert app.query(request).only_partition_result().result == 2  # type: ignore[union-attr]
        windows = StateQueryRequest.in_store("clicks").with_query(
            WindowKeyQuery.with_key_and_window_start_range("a", 0, 100)
        )
        with app.query(windows).only_partition_result().result as found:  # type: ignore[union-attr]
            assert list(found) == [(20, 7)]


class _MissingEngine:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine(name="ghost", key_value_store="iqstate_ghost.store:GhostStore"))
        register(
            Engine(
                name="typo",
                key_value_store="iqstate.engines.memory:MemoryKeyValueStore",
                check_config="iqstate.engines.memory:check_options",
            )
        )


def test_a_target_that_cannot_be_imported_fails_naming_plugin_engine_and_target(
    tmp_path: Path,
) -> None:
    # Registering costs no import, so a broken engine does not stop the others.
    registry = registry_of(load_entry_points=False, extra_plugins=[("ghosts", _MissingEngine())])
    assert {"ghost", "typo", "memory"} <= set(registry.engines)
    listed = {engine["name"]: engine for engine in describe_plugins(registry)["engines"]}
    assert "No module named 'iqstate_ghost'" in listed["ghost"]["error"]
    assert listed["memory"]["error"] is None and "KeyQuery" in listed["memory"]["answers"]
    app = Application("ghosts", tmp_path, plugins=registry)
    with pytest.raises(PluginError) as typo:
        app.key_value_store("s", 1, engine="typo")
    assert "plugin 'ghosts', engine 'typo'" in str(typo.value)
    assert "'iqstate.engines.memory:check_options'" in str(typo.value)
    assert "has no attribute 'check_options'" in str(typo.value)
    with pytest.raises(PluginError) as ghost:
        app.key_value_store("s", 1, engine="ghost")
    message = str(ghost.value)
    assert "plugin 'ghosts', engine 'ghost'" in message
    assert "'iqstate_ghost.store:GhostStore'" in message
    assert "No module named 'iqstate_ghost'" in message


def test_malformed_engine_targets_are_refused_where_the_engine_is_built() -> None:
    with pytest.raises(PluginError, match="engine 'x', key_value_store: expected an import path"):
        Engine(name="x", key_value_store="iqstate_x.store")
    with pytest.raises(TypeError, match="engine 'x': window_store must be a callable"):
        Engine(name="x", key_value_store=MemoryKeyValueStore, window_store=42)  # type: ignore[arg-type]


def count_entries(store: Any, query: Any, bound: Any, config: Any) -> QueryResult[int]:
    return QueryResult.for_result(store.approximate_num_entries())


def add_no_arguments(parser: Any) -> None:
    parser.add_argument("--times", type=int, default=1)


def run_hello(args: Any) -> int:
    return 40 + args.times


class _LazyParts:
    """A handler and a command registered by import path."""

    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(EntryCountQuery, "memory.key_value", f"{__name__}:count_entries")

    @hookimpl
    def iqstate_register_commands(self, register: Any) -> None:
        register("hello", "says hello", f"{__name__}:add_no_arguments", f"{__name__}:run_hello")


class EntryCountQuery(Query[int]):
    __slots__ = ()


def test_handlers_and_commands_registered_by_import_path() -> None:
    registry = registry_of(load_entry_points=False, extra_plugins=[("parts", _LazyParts())])
    store = memory_chain(registry)
    store.put_all([("a", 1), ("b", 2)])
    store.commit({})
    assert store.query(EntryCountQuery()).result == 2
    assert registry.query_handlers.owner("memory.key_value", EntryCountQuery) == "parts"
    command = registry.commands["hello"]
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.run(parser.parse_args(["--times", "2"])) == 42


def test_every_engine_lists_the_store_types_it_provides() -> None:
    """`iqstate plugins` says which store types each engine has, and that those without a
    store of their own keep versioned and session stores in their key-value stores (LMDB
    has its own versioned store, reading timelines in its map in place)."""
    listed = {engine["name"]: engine for engine in describe_plugins(registry_of())["engines"]}
    for name in ("memory", "rocksdb", "lmdb", "sqlite"):
        types = listed[name]["store_types"]
        own = name == "lmdb"
        versioned = "versioned_key_value" + ("" if own else " (kept in its key-value stores)")
        assert versioned in types, name
        assert {"timestamped_key_value", "global_key_value"} <= set(types), name
        assert {"VersionedKeyQuery", "MultiVersionedKeyQuery", "VersionedRangeQuery"} <= set(
            listed[name]["answers"]
        ), name
