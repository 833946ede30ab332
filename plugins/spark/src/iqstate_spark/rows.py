"""Which columns of a micro-batch make a store's entries, and reading them from Arrow.

Shared by the embedded sink (a whole batch as one Arrow table on the driver) and the
distributed sink (each Spark task's Arrow record batches on an executor), so both read the
same rows the same way: `key` is the key column; `value` the value column (a list of columns
makes a dict value; `None`, every other column); a null value or a true `tombstone` column
deletes the key; `window` is a struct column with `start` (as `F.window` makes), for window
stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from iqstate.errors import IqstateError

_MS_PER_UNIT = {"s": 1000, "ms": 1, "us": 0.001, "ns": 0.000001}

Rows = pa.Table | pa.RecordBatch


@dataclass(frozen=True)
class RowColumns:
    """The columns a sink reads: see the module docstring."""

    store: str
    key: str
    value: str | tuple[str, ...] | None
    window: str | None
    tombstone: str | None

    @classmethod
    def of(
        cls,
        store: str,
        key: str,
        value: str | Sequence[str] | None,
        window: str | None,
        tombstone: str | None,
    ) -> RowColumns:
        chosen = value if value is None or isinstance(value, str) else tuple(value)
        return cls(store, key, chosen, window, tombstone)

    def check(self, names: Sequence[str]) -> None:
        """Refuse rows without a column the sink reads, naming what is missing."""
        wanted = [self.key, self.window, self.tombstone]
        if isinstance(self.value, str):
            wanted.append(self.value)
        elif self.value is not None:
            wanted.extend(self.value)
        missing = [c for c in wanted if c and c not in names]
        if missing:
            raise IqstateError(
                f"to_store({self.store!r}): the batch has no column(s) {missing}; it has "
                f"{list(names)}"
            )

    def keys(self, rows: Rows) -> list[Any]:
        return rows.column(self.key).to_pylist()

    def values(self, rows: Rows) -> list[Any]:
        """Each row's value; `None` where the row deletes its key."""
        if self.value is None:
            names = [
                c for c in rows.column_names if c not in (self.key, self.window, self.tombstone)
            ]
            values: list[Any] = rows.select(names).to_pylist()
        elif isinstance(self.value, str):
            values = rows.column(self.value).to_pylist()
        else:
            values = rows.select(list(self.value)).to_pylist()
        if self.tombstone is not None:
            deleted = rows.column(self.tombstone).to_pylist()
            values = [None if gone else value for value, gone in zip(values, deleted, strict=True)]
        return values

    def window_starts_ms(self, rows: Rows) -> list[int]:
        """Each row's window start in epoch milliseconds."""
        assert self.window is not None
        column = rows.column(self.window)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not isinstance(column, pa.StructArray):
            raise IqstateError(
                f"to_store({self.store!r}): column {self.window!r} must be a window (a struct "
                f"with 'start', as F.window makes), got {column.type}"
            )
        starts = column.field("start")
        if starts.null_count:
            raise IqstateError(f"to_store({self.store!r}): a row's window has no start")
        scale = _MS_PER_UNIT[starts.type.unit]
        return [int((value or 0) * scale) for value in starts.cast(pa.int64()).to_pylist()]
