"""iqstate's RocksDB engine (`engine="rocksdb"`).

`RocksDBKeyValueStore` and `RocksDBWindowStore` are imported (with rocksdict) on first use.
"""

from typing import TYPE_CHECKING

from iqstate.lazy import lazy_exports
from iqstate_rocksdb.plugin import ROCKSDB_ENGINE

if TYPE_CHECKING:
    from iqstate_rocksdb.store import RocksDBKeyValueStore, RocksDBWindowStore

__all__ = ["ROCKSDB_ENGINE", "RocksDBKeyValueStore", "RocksDBWindowStore"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"iqstate_rocksdb.store": ["RocksDBKeyValueStore", "RocksDBWindowStore"]}
)
