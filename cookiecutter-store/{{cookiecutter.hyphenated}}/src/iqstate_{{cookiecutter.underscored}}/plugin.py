"""The plugin iqstate loads through the `iqstate` entry point.

Every iqstate application imports this module when it is created, so it stays cheap:
the store is named by import path and imported when a store of this engine is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
from iqstate_{{ cookiecutter.underscored }}.query import EntryCountQuery, answer_entry_count, decode, encode

KIND = "{{ cookiecutter.hyphenated }}.key_value"
"""The kind of this engine's key-value stores (`{{ cookiecutter.class_prefix }}Store.kind`)."""
WINDOW_KIND = "{{ cookiecutter.hyphenated }}.window"
"""The kind of its window stores (`{{ cookiecutter.class_prefix }}WindowStore.kind`)."""

OPTIONS: frozenset[str] = frozenset()
"""The engine options a store may give (`config={...}` at declaration); none yet. Add
yours here and read them from `context.config` in the store's `_open_storage`."""


def check_config(config: Mapping[str, Any], store_name: str) -> None:
    """Refuse options this engine does not know when the store is declared: a typo fails
    there, naming the option, instead of being ignored."""
    unknown = sorted(set(config) - OPTIONS)
    if unknown:
        known = ", ".join(sorted(OPTIONS)) or "none"
        raise ValueError(
            f"store {store_name!r}: the {{ cookiecutter.hyphenated }} engine has no option "
            f"{', '.join(map(repr, unknown))} (its options: {known})"
        )


ENGINE = Engine(
    name="{{ cookiecutter.hyphenated }}",
    key_value_store="iqstate_{{ cookiecutter.underscored }}.store:{{ cookiecutter.class_prefix }}Store",
    window_store="iqstate_{{ cookiecutter.underscored }}.store:{{ cookiecutter.class_prefix }}WindowStore",
    persistent=True,
    description="{{ cookiecutter.description }}",
    check_config=check_config,
    # Timestamped, versioned, session and global stores come with the key-value store:
    # versioned and session stores are kept in its key spaces, with its commits and crash
    # guarantees. For a layout of its own, give a factory `(name, retention_ms)` by import
    # path: versioned_store="iqstate_{{ cookiecutter.underscored }}.versioned:MyVersionedStore",
    # session_store=... (a `VersionedKeyValueStore` / `SessionStore` over bytes).
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    # The built-in queries are answered through the KeyValueStore interface already;
    # register only what this engine answers itself.
    register(EntryCountQuery, KIND, answer_entry_count)


@hookimpl
def iqstate_register_query_codecs(register: Any) -> None:
    register("{{ cookiecutter.underscored }}_entry_count", EntryCountQuery, decode, encode)
