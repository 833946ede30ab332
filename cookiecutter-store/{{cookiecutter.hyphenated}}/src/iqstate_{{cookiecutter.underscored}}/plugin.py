"""The plugin iqstate loads through the `iqstate` entry point."""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
from iqstate_{{ cookiecutter.underscored }}.query import EntryCountQuery, answer_entry_count, decode, encode
from iqstate_{{ cookiecutter.underscored }}.store import {{ cookiecutter.class_prefix }}Store

ENGINE = Engine(
    name="{{ cookiecutter.hyphenated }}",
    key_value_store={{ cookiecutter.class_prefix }}Store,
    persistent=True,
    description="{{ cookiecutter.description }}",
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    # The built-in queries are answered through the KeyValueStore interface already;
    # register only what this engine answers itself.
    register(EntryCountQuery, {{ cookiecutter.class_prefix }}Store.kind, answer_entry_count)


@hookimpl
def iqstate_register_query_codecs(register: Any) -> None:
    register("{{ cookiecutter.underscored }}_entry_count", EntryCountQuery, decode, encode)
