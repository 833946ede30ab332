"""Names two plugins both register: the plugin loaded first (a built-in before any
installed plugin) owns the name, and the error tells what to do about the newcomer."""

from __future__ import annotations

from typing import Any

import pytest

from iqstate import Engine, KeyQuery, PluginError, QueryResult, Serdes
from iqstate.cli import build_parser
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.hookspecs import hookimpl
from iqstate.plugins import BLOCK_ENV, BUILTIN_COMMANDS, PluginRegistry, make_plugin_manager


def registry_with(*plugins: tuple[str, object]) -> PluginRegistry:
    manager = make_plugin_manager(load_entry_points=False, extra_plugins=plugins)
    return PluginRegistry.from_plugin_manager(manager)


class _MemoryImpostor:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine(name="memory", key_value_store=MemoryKeyValueStore))


class _KeyQueryShadow:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(KeyQuery, "metered.key_value", lambda *_: QueryResult.for_result(None))


class _JsonShadow:
    @hookimpl
    def iqstate_register_serdes(self, register: Any) -> None:
        register("json", Serdes.string())


@pytest.mark.parametrize(
    ("plugin", "builtin", "what"),
    [
        (_MemoryImpostor(), "memory", "an engine named 'memory'"),
        (_KeyQueryShadow(), "builtins", "a handler for KeyQuery on store kind 'metered.key_value'"),
        (_JsonShadow(), "builtins", "a serde named 'json'"),
    ],
    ids=["engine", "handler", "serde"],
)
def test_a_plugin_taking_a_built_in_name_is_the_one_blamed(
    plugin: object, builtin: str, what: str
) -> None:
    with pytest.raises(PluginError) as error:
        registry_with(("newcomer", plugin))
    message = str(error.value)
    assert message.startswith(f"plugins {builtin!r} and 'newcomer' both register {what}")
    assert f"{BLOCK_ENV}=newcomer" in message
    assert f"{BLOCK_ENV}={builtin}" not in message, "never advise blocking the built-in"


class _SharedEngine:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine(name="shared", key_value_store=MemoryKeyValueStore))


class _SharedEngineToo:
    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(Engine(name="shared", key_value_store=MemoryKeyValueStore))


def test_between_two_installed_plugins_the_one_loaded_first_owns_the_name() -> None:
    with pytest.raises(PluginError) as error:
        registry_with(("first", _SharedEngine()), ("second", _SharedEngineToo()))
    assert str(error.value).startswith("plugins 'first' and 'second' both register an engine")


class _Command:
    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def iqstate_register_commands(self, register: Any) -> None:
        register(self.name, "shadow", lambda parser: None, lambda args: 0)


class _DemoCommand:
    @hookimpl
    def iqstate_register_commands(self, register: Any) -> None:
        register("demo", "another demo", lambda parser: None, lambda args: 0)


@pytest.mark.parametrize("name", sorted(BUILTIN_COMMANDS))
def test_a_plugin_command_named_like_a_built_in_one_is_refused(name: str) -> None:
    with pytest.raises(PluginError) as error:
        registry_with(("shadow", _Command(name)))
    assert f"plugin 'shadow' registers the command {name!r}" in str(error.value)
    assert "built-in" in str(error.value)


def test_the_built_in_commands_are_those_the_cli_has() -> None:
    usage = build_parser(registry_with()).format_usage()  # "usage: iqstate [-h] {a,b} ..."
    assert set(usage.split("{")[1].split("}")[0].split(",")) == BUILTIN_COMMANDS


def test_two_plugins_with_the_same_command_are_both_named() -> None:
    with pytest.raises(PluginError) as error:
        registry_with(("spark-ish", _Command("demo")), ("other", _DemoCommand()))
    assert str(error.value).startswith(
        "plugins 'spark-ish' and 'other' both register the command 'demo'"
    )


def test_two_instances_of_one_plugin_class_are_two_plugins() -> None:
    """The same hook method on two instances: each registration is credited to its own
    instance, and a conflict between them names both."""
    loaded = registry_with(("one", _Command("first")), ("two", _Command("second")))
    assert {name: command.plugin for name, command in loaded.commands.items()} == {
        "first": "one",
        "second": "two",
    }
    with pytest.raises(PluginError) as error:
        registry_with(("one", _Command("same")), ("two", _Command("same")))
    assert str(error.value).startswith("plugins 'one' and 'two' both register the command 'same'")
