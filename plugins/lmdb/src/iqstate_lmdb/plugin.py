"""The `lmdb` engine as an iqstate plugin."""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl
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
