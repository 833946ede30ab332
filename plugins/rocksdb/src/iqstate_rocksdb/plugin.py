"""The `rocksdb` engine as an iqstate plugin.

Loaded by every application at start, so it imports nothing of RocksDB: the stores and
the option check are named by import path and imported when a `rocksdb` store is declared.
"""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl

ROCKSDB_ENGINE = Engine(
    name="rocksdb",
    key_value_store="iqstate_rocksdb.store:RocksDBKeyValueStore",
    window_store="iqstate_rocksdb.store:RocksDBWindowStore",
    persistent=True,
    description="RocksDB (rocksdict): one database per partition, offsets in a column family",
    check_config="iqstate_rocksdb.options:check_config",
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(ROCKSDB_ENGINE)
