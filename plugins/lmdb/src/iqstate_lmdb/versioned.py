"""LMDB's versioned store: the layered one (`iqstate.versioned_store`), its as-of ranges
reading the timelines in LMDB's map in place.

A timeline holds all of a key's versions (1.1 KB for ten of 100 bytes); copying each out of
the map and unsealing it was two thirds of an as-of range. Here one compiled pass over the
cursor checks each record's seal where it lies, with the records a few ahead fetched from
memory meanwhile, and copies out only the version it selects. Without the compiled pass,
or while a batch's writes are pending, the layered store's own reading answers.
"""

from __future__ import annotations

from iqstate.version_selection import FoundLists, select_sealed
from iqstate.versioned_store import LayeredVersionedStore
from iqstate_lmdb.store import LMDBKeyValueStore


class LMDBVersionedStore(LayeredVersionedStore):
    """A versioned store in an `LMDBKeyValueStore`, keeping `history_retention_ms`."""

    def __init__(self, name: str, history_retention_ms: int) -> None:
        self._lmdb = LMDBKeyValueStore(name)
        super().__init__(self._lmdb, history_retention_ms)

    def select_in_chunk(
        self,
        low: bytes,
        high: bytes | None,
        chunk: int,
        as_of: int | None,
        boundary: int,
        wanted: int | None,
        found: FoundLists,
    ) -> tuple[int, bytes | None]:
        if select_sealed is not None:
            lengths = [len(column) for column in found]
            select = select_sealed
            read = self._lmdb.read_stored(
                low, lambda records: select(records, high, chunk, as_of, boundary, wanted, found)
            )
            if read is not None:
                return read
            for index, length in enumerate(lengths):
                del found[index][length:]  # a damaged record: the layered reading names it
        return super().select_in_chunk(low, high, chunk, as_of, boundary, wanted, found)
