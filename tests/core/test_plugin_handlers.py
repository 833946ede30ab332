"""Mistakes in a plugin's query handlers, reported where the plugin author looks: a handler
returning a plain value, a handler for a misspelt store kind, swapped `register` arguments."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from iqstate import (
    FailureReason,
    KeyQuery,
    PluginError,
    Query,
    Serdes,
    StateStoreContext,
)
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.hookspecs import hookimpl
from iqstate.layers import build_key_value_chain
from iqstate.plugins import PluginRegistry, make_plugin_manager


class CountQuery(Query[int]):
    __slots__ = ()


def registry_with(plugin: object) -> PluginRegistry:
    manager = make_plugin_manager(load_entry_points=False, extra_plugins=[("counting", plugin)])
    return PluginRegistry.from_plugin_manager(manager)


class _RawReturn:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(CountQuery, "memory.key_value", lambda s, q, b, c: s.approximate_num_entries())


def test_a_handler_returning_a_plain_value_fails_the_query_saying_so() -> None:
    store = build_key_value_chain(MemoryKeyValueStore("s"), Serdes.string(), Serdes.int64())
    handlers = registry_with(_RawReturn()).query_handlers
    store.init(StateStoreContext("a", "s", 0, query_handlers=handlers))
    store.put("a", 1)
    result = store.query(CountQuery())
    assert result.failure_reason is FailureReason.STORE_EXCEPTION
    assert result.failure_message.startswith(
        "the handler for CountQuery on memory.key_value store 's' returned int, not a QueryResult"
    )
    assert result.position is not None, "the failure still carries the store's position"


class _MisspeltKind:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(CountQuery, "memory.keyvalue", "somewhere:count")
        register(CountQuery, "metered.keyvalue", "somewhere:count")
        register(CountQuery, "memory.versioned", "somewhere:count")  # it is layered.versioned


class _KindOfAnotherEngine:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(CountQuery, "cassandra.key_value", "somewhere:count")  # not installed here
        register(CountQuery, "memory.key_value", "somewhere:count")


def test_a_handler_for_a_misspelt_store_kind_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        registry_with(_MisspeltKind())
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        "plugin 'counting'" in m
        and "'memory.keyvalue'" in m
        and "did you mean 'memory.key_value'" in m
        for m in messages
    ), messages
    assert any("did you mean 'metered.key_value'" in m for m in messages), messages
    assert any("'memory.versioned'" in m for m in messages), messages


def test_handlers_for_real_kinds_or_engines_not_installed_are_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="iqstate.plugins"):
        registry_with(_KindOfAnotherEngine())
    assert caplog.records == []


class _SwappedArguments:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register("memory.key_value", KeyQuery, "somewhere:handler")


def test_swapped_register_arguments_are_explained() -> None:
    with pytest.raises(PluginError) as error:
        registry_with(_SwappedArguments())
    assert "register(query_type, store_kind_or_class, handler)" in str(error.value)


class _InterfaceByName:
    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        register(CountQuery, "KeyValueStore", "somewhere:count")  # the class was meant


def test_a_store_interface_named_as_a_kind_string_is_refused() -> None:
    # No store has the kind "KeyValueStore": the handler would never run, silently.
    with pytest.raises(PluginError) as error:
        registry_with(_InterfaceByName())
    assert "for the kind 'KeyValueStore', which no store has" in str(error.value)
    assert "give the class iqstate.store.KeyValueStore itself" in str(error.value)
