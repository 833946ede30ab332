"""The hooks an iqstate plugin implements.

Plugins are modules (or objects) with `@hookimpl` functions, found through the
entry-point group `iqstate`. Each hook receives a `register` callback, so a plugin
says what it provides instead of returning it:

    from iqstate.hookspecs import hookimpl

    @hookimpl
    def iqstate_register_engines(register):
        register(Engine(name="mine", key_value_store="my_plugin.store:MyStore"))

Every application loads every installed plugin when it is created, so a plugin module
must be cheap to import: name heavy objects (store classes, handlers, commands, codecs)
by import path, `"module:attribute"`, and they are imported when first used.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "iqstate"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def iqstate_register_engines(register: Any) -> None:
    """Register storage engines: `register(engine: iqstate.engine.Engine)`; the engine's
    store factories and `check_config` may be import paths, imported on first use."""


@hookspec
def iqstate_register_query_handlers(register: Any) -> None:
    """Register query handlers: `register(query_type, store_kind, handler)`.

    `handler(store, query, position_bound, config) -> QueryResult` answers `query_type`
    on stores whose `kind` is `store_kind` (for example `"memory.key_value"`,
    `"rocksdb.key_value"` or a layer such as `"metered.key_value"`). The handler may be
    an import path (`"module:function"`), imported when a store first answers with it.
    An engine store's handler that returns anything but a `QueryResult` fails the query
    with `STORE_EXCEPTION`.
    """


@hookspec
def iqstate_register_serdes(register: Any) -> None:
    """Register serdes by name: `register(name: str, serde: iqstate.serdes.Serde)`."""


@hookspec
def iqstate_register_commands(register: Any) -> None:
    """Register `iqstate` subcommands: `register(name, help, add_arguments, run)`.

    `add_arguments(parser)` adds the command's options to an `argparse` parser;
    `run(args) -> int` runs it and returns the exit code. Either may be an import path
    (`"module:function"`), imported only by the `iqstate` command. A name `iqstate`
    itself uses (`plugins`, `new-store`) or another plugin registered first is refused.
    """


@hookspec
def iqstate_register_query_codecs(register: Any) -> None:
    """Register JSON codecs for query types, for the HTTP service.

    `register(name, query_type, decode, encode, resume=None)`: `decode(body, key_from_json)`
    builds the query from its JSON object (`key_from_json(value)` turns a JSON key into the
    store's key type); `encode(result, to_json)` turns a successful result into JSON
    (`to_json(value)` encodes one key or value). A query whose result is rows ordered by
    key, each encoded as a list whose first item is the key, may give `resume(query, key,
    serialize_key) -> (query, within)`: a query of its rows from `key` on (inclusive; all
    of them for `None`), and `within(key_bytes)`, false once they leave the original
    query's (or `None`); the service then pages it across partitions (`"merge": true`),
    reading a page's worth at a time when that query is a `RangeQuery`. `decode`, `encode` and
    `resume` may be import paths, imported when the HTTP service first uses them.
    """
