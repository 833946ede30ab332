"""iqstate's LMDB engine (`engine="lmdb"`)."""

from iqstate_lmdb.plugin import LMDB_ENGINE
from iqstate_lmdb.store import LMDBKeyValueStore

__all__ = ["LMDB_ENGINE", "LMDBKeyValueStore"]
