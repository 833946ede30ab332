"""The `lmdb` engine as an iqstate plugin."""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
from iqstate.store_handlers import key_value_handlers, window_handlers
from iqstate_lmdb.options import check_config
from iqstate_lmdb.store import LMDBKeyValueStore, LMDBWindowStore

LMDB_ENGINE = Engine(
    name="lmdb",
    key_value_store=LMDBKeyValueStore,
    window_store=LMDBWindowStore,
    persistent=True,
    description="LMDB: one environment per partition, offsets in a named sub-database",
    check_config=check_config,
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(LMDB_ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    for query_type, handler in key_value_handlers().items():
        register(query_type, LMDBKeyValueStore.kind, handler)
    for query_type, handler in window_handlers().items():
        register(query_type, LMDBWindowStore.kind, handler)
