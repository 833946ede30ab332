"""The `sqlite` engine: a persistent key-value (and window) engine on sqlite3.

This module is the plugin iqstate loads at every application's start, so it imports no
sqlite3: the stores (`iqstate_sqlite.store`) and the option check are named by import
path and imported when a `sqlite` store is declared. `StorageStatsQuery` is answered with
SQL aggregates, by this engine only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iqstate import Engine, PositionBound, Query, QueryConfig, QueryResult
from iqstate.hookspecs import hookimpl
from iqstate.lazy import lazy_exports

if TYPE_CHECKING:
    from iqstate_sqlite.store import SQLiteKeyValueStore, SQLiteWindowStore

__all__ = ["SQLITE_ENGINE", "SQLiteKeyValueStore", "SQLiteWindowStore", "StorageStatsQuery"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"iqstate_sqlite.store": ["SQLiteKeyValueStore", "SQLiteWindowStore"]}
)

KEY_VALUE_KIND = "sqlite.key_value"
"""`SQLiteKeyValueStore.kind`, known here without importing the store."""


class StorageStatsQuery(Query[dict[str, int]]):
    """Committed entries and bytes of a partition: `{"entries", "key_bytes", "value_bytes"}`."""

    __slots__ = ()


def answer_storage_stats(
    store: SQLiteKeyValueStore, query: StorageStatsQuery, bound: PositionBound, config: QueryConfig
) -> QueryResult[dict[str, int]]:
    """Committed entries and bytes; the uncommitted overlay is not counted."""
    return QueryResult.for_result(store.storage_stats())


SQLITE_ENGINE = Engine(
    name="sqlite",
    key_value_store="iqstate_sqlite.store:SQLiteKeyValueStore",
    window_store="iqstate_sqlite.store:SQLiteWindowStore",
    persistent=True,
    description="SQLite (sqlite3): one database per partition, offsets in the same transaction",
    check_config="iqstate_sqlite.options:check_config",
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(SQLITE_ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    # The built-in queries come through the store interfaces; only its own query here.
    register(StorageStatsQuery, KEY_VALUE_KIND, answer_storage_stats)
