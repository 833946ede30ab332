"""iqstate's RocksDB engine (`engine="rocksdb"`)."""

from iqstate_rocksdb.plugin import ROCKSDB_ENGINE
from iqstate_rocksdb.store import RocksDBKeyValueStore

__all__ = ["ROCKSDB_ENGINE", "RocksDBKeyValueStore"]
