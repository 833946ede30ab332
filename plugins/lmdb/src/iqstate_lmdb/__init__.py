"""iqstate's LMDB engine (`engine="lmdb"`).

`LMDBKeyValueStore` and `LMDBWindowStore` are imported (with lmdb) on first use.
"""

from typing import TYPE_CHECKING

from iqstate.lazy import lazy_exports
from iqstate_lmdb.plugin import LMDB_ENGINE

if TYPE_CHECKING:
    from iqstate_lmdb.store import LMDBKeySizeError, LMDBKeyValueStore, LMDBWindowStore

__all__ = ["LMDB_ENGINE", "LMDBKeySizeError", "LMDBKeyValueStore", "LMDBWindowStore"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"iqstate_lmdb.store": ["LMDBKeySizeError", "LMDBKeyValueStore", "LMDBWindowStore"]}
)
