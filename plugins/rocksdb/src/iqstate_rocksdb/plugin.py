"""The `rocksdb` engine as an iqstate plugin."""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
from iqstate.store_handlers import key_value_handlers, window_handlers
from iqstate_rocksdb.options import check_config
from iqstate_rocksdb.store import RocksDBKeyValueStore, RocksDBWindowStore

ROCKSDB_ENGINE = Engine(
    name="rocksdb",
    key_value_store=RocksDBKeyValueStore,
    window_store=RocksDBWindowStore,
    persistent=True,
    description="RocksDB (rocksdict): one database per partition, offsets in a column family",
    check_config=check_config,
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(ROCKSDB_ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    for query_type, handler in key_value_handlers().items():
        register(query_type, RocksDBKeyValueStore.kind, handler)
    for query_type, handler in window_handlers().items():
        register(query_type, RocksDBWindowStore.kind, handler)
