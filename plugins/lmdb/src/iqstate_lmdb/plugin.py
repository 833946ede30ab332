"""The `lmdb` engine as an iqstate plugin.

Loaded by every application at start, so it imports nothing of LMDB: the stores and the
option check are named by import path and imported when an `lmdb` store is declared.
"""

from __future__ import annotations

from typing import Any

from iqstate.engine import Engine
from iqstate.hookspecs import hookimpl

LMDB_ENGINE = Engine(
    name="lmdb",
    key_value_store="iqstate_lmdb.store:LMDBKeyValueStore",
    window_store="iqstate_lmdb.store:LMDBWindowStore",
    versioned_store="iqstate_lmdb.versioned:LMDBVersionedStore",
    persistent=True,
    description="LMDB: one environment per partition, offsets in a named sub-database",
    check_config="iqstate_lmdb.options:check_config",
    key_sizes=(1, 511),  # LMDB's default MDB_MAXKEYSIZE, which py-lmdb's build keeps
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(LMDB_ENGINE)
