"""The `rocksdb` engine as an iqstate plugin."""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
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
