"""Which columns of a micro-batch make a store's entries, and reading them from Arrow.

Shared by the embedded sink (a whole batch as one Arrow table on the driver) and the
distributed sink (each Spark task's Arrow record batches on an executor), so both read the
same rows the same way: `key` is the key column; `value` the value column (a list of columns
makes a dict value; `None`, every other column); a null value or a true `tombstone` column
deletes the key; and at most one column of times, which the store's type asks for:

- `window`: a struct column with `start` (as `F.window` makes), for window stores;
- `timestamp`: an event-time column, for timestamped and versioned stores: a timestamp
  (Spark's `TimestampType`), or an integer taken as epoch milliseconds;
- `session`: a struct column with `start` and `end` (as `F.session_window` makes), for
  session stores.

Times reach the stores as epoch milliseconds (a timestamp's finer part is dropped, rounding
down, as Spark's `unix_millis` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from iqstate.errors import IqstateError

_MS_IN = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}
"""A timestamp unit's `(multiplier, divisor)` to epoch milliseconds."""

_STRUCTS = {
    "window": "window (a struct with 'start', as F.window makes)",
    "session": "session (a struct with 'start' and 'end', as F.session_window makes)",
}

Rows = pa.Table | pa.RecordBatch


@dataclass(frozen=True)
class RowColumns:
    """The columns a sink reads: see the module docstring."""

    store: str
    key: str
    value: str | tuple[str, ...] | None
    window: str | None
    tombstone: str | None
    timestamp: str | None = None
    session: str | None = None
    window_size_ms: int | None = None
    """The store's window size, where the writer knows it: each row's window must have it."""

    @classmethod
    def of(
        cls,
        store: str,
        key: str,
        value: str | Sequence[str] | None,
        window: str | None,
        tombstone: str | None,
        timestamp: str | None = None,
        session: str | None = None,
        window_size_ms: int | None = None,
    ) -> RowColumns:
        chosen = value if value is None or isinstance(value, str) else tuple(value)
        return cls(store, key, chosen, window, tombstone, timestamp, session, window_size_ms)

    def _arguments(self) -> dict[str, str]:
        """The columns read besides the value's, by the `to_store` argument naming them."""
        named = {
            "key": self.key,
            "window": self.window,
            "tombstone": self.tombstone,
            "timestamp": self.timestamp,
            "session": self.session,
        }
        return {argument: column for argument, column in named.items() if column is not None}

    def check(self, names: Sequence[str]) -> None:
        """Refuse rows without a column the sink reads, naming what is missing and the
        argument that named it."""
        wanted = list(self._arguments().items())
        if isinstance(self.value, str):
            wanted.append(("value", self.value))
        elif self.value is not None:
            wanted.extend(("value", column) for column in self.value)
        lacking = [(argument, column) for argument, column in wanted if column not in names]
        if lacking:
            missing = [column for _, column in lacking]
            arguments = ", ".join(dict.fromkeys(f"{argument}=" for argument, _ in lacking))
            raise IqstateError(
                f"to_store({self.store!r}): the batch has no column(s) {missing} (named by "
                f"{arguments}); it has {list(names)}"
            )

    def describe_value(self) -> str:
        """Where a row's value comes from, for messages."""
        if isinstance(self.value, str):
            return f"column {self.value!r}"
        if self.value is not None:
            return f"columns {list(self.value)}"
        return "the columns not named otherwise"

    def keys(self, rows: Rows) -> list[Any]:
        """Each row's key; refuses a null one, naming its column (no lookup could ask for
        it, and a JSON serde would store it as `null`)."""
        column = rows.column(self.key)
        if column.null_count:
            raise IqstateError(null_key(self.store, self.key))
        return _python(column)

    def values(self, rows: Rows) -> list[Any]:
        """Each row's value; `None` where the row deletes its key."""
        if self.value is None:
            read = set(self._arguments().values())
            names = [c for c in rows.column_names if c not in read]
            values: list[Any] = _python(rows.select(names))
        elif isinstance(self.value, str):
            values = _python(rows.column(self.value))
        else:
            values = _python(rows.select(list(self.value)))
        if self.tombstone is not None:
            deleted = self._deleted(rows)
            values = [None if gone else value for value, gone in zip(values, deleted, strict=True)]
        return values

    def _deleted(self, rows: Rows) -> list[bool | None]:
        """The tombstone column's flags (a null deletes nothing, as in Spark's `when`, and
        a column of nulls only, `F.lit(None)`, is taken): boolean only, since a string
        `"false"` or any other truthy value would delete."""
        assert self.tombstone is not None
        column = _array(rows.column(self.tombstone))
        if not (pa.types.is_boolean(column.type) or pa.types.is_null(column.type)):
            raise IqstateError(
                f"to_store({self.store!r}): column {self.tombstone!r} (tombstone=) must be "
                f"boolean, got {column.type} (cast it, e.g. F.col(...) == 'yes')"
            )
        return cast("list[bool | None]", column.to_pylist())

    @property
    def checks_types(self) -> bool:
        """Whether a column read must be of a type (times, tombstone): see `check_types`."""
        return self.reads_times or self.tombstone is not None

    def check_types(self, rows: Rows) -> None:
        """Refuse rows whose times or tombstone column is of the wrong type, naming it (the
        schema's empty table will do: nothing is written before this)."""
        if self.reads_times:
            self.times(rows)
        if self.tombstone is not None:
            self._deleted(rows)

    @property
    def reads_times(self) -> bool:
        """Whether rows carry times (`times` is not `None`)."""
        return self.window is not None or self.timestamp is not None or self.session is not None

    def times(self, rows: Rows) -> list[Any] | None:
        """Each row's time, in epoch milliseconds: its window start (`window`), its
        timestamp (`timestamp`) or its session's `(start, end)` (`session`); `None` when the
        rows carry no time (key-value stores)."""
        if self.window is not None:
            starts = self._epoch_ms(self._field(rows, "window", "start"), "window", "start")
            if self.window_size_ms is not None:
                self._check_window_size(rows, starts, self.window_size_ms)
            return starts
        if self.timestamp is not None:
            return self._epoch_ms(_array(rows.column(self.timestamp)), "timestamp")
        if self.session is not None:
            starts = self._epoch_ms(self._field(rows, "session", "start"), "session", "start")
            ends = self._epoch_ms(self._field(rows, "session", "end"), "session", "end")
            return list(zip(starts, ends, strict=True))
        return None

    def _check_window_size(self, rows: Rows, starts: list[int], size: int) -> None:
        """Refuse windows of another size than the store's (`F.window("ts", "10 seconds")`
        into a store of minutes would be read back as minutes of ten-second counts).
        Compared in Arrow, in the columns' own unit: no Python step per row."""
        start, end = self._field(rows, "window", "start"), self._field(rows, "window", "end")
        if start.type == end.type:
            self._check_times(end, "window", "end")
            multiplier, divisor = _units_to_ms(end.type)
            lasting = pc.subtract(end.cast(pa.int64()), start.cast(pa.int64()))
        else:  # a struct made by hand: compared in milliseconds
            ends = pa.array(self._epoch_ms(end, "window", "end"), pa.int64())
            lasting = pc.subtract(ends, pa.array(starts, pa.int64()))
            multiplier, divisor = 1, 1
        scaled = pc.multiply(lasting, pa.scalar(multiplier, pa.int64()))
        wrong = pc.not_equal(scaled, pa.scalar(size * divisor, pa.int64()))
        if not pc.any(wrong).as_py():
            return
        first = lasting[pc.index(wrong, True).as_py()].as_py() * multiplier // divisor
        raise IqstateError(
            f"to_store({self.store!r}): a row's window lasts {first} ms (column "
            f"{self.window!r}, window=), but the store's windows are {size} ms: declare "
            "the store with the window size the query groups by"
        )

    def _field(self, rows: Rows, argument: str, field: str) -> pa.Array[Any]:
        """Field `field` of the struct column named by `argument` (`window` or `session`)."""
        name = self._arguments()[argument]
        column = _array(rows.column(name))
        if not isinstance(column, pa.StructArray) or column.type.get_field_index(field) < 0:
            raise IqstateError(
                f"to_store({self.store!r}): column {name!r} ({argument}=) must be a "
                f"{_STRUCTS[argument]}, got {column.type}"
            )
        if column.null_count:
            raise IqstateError(
                f"to_store({self.store!r}): a row has a null {argument} (column {name!r}, "
                f"{argument}=); every row needs one"
            )
        return column.field(field)

    def _epoch_ms(self, times: pa.Array[Any], argument: str, field: str = "") -> list[int]:
        """`times` (timestamps, or integers taken as milliseconds) in epoch milliseconds:
        the column named by `argument`, or its struct's `field`."""
        self._check_times(times, argument, field)
        numbers = cast("list[int]", times.cast(pa.int64()).to_pylist())  # no nulls: checked
        multiplier, divisor = _units_to_ms(times.type)
        if divisor > 1:
            return [number // divisor for number in numbers]
        return [number * multiplier for number in numbers] if multiplier > 1 else numbers

    def _check_times(self, times: pa.Array[Any], argument: str, field: str = "") -> None:
        """Refuse `times` with a null, or of a type other than timestamps or integers."""
        name = self._arguments()[argument]
        if times.null_count:
            what = f"{argument} {field}" if field else argument
            raise IqstateError(
                f"to_store({self.store!r}): a row has a null {what} (column {name!r}, "
                f"{argument}=); every row needs one"
            )
        kind = times.type
        if not (pa.types.is_integer(kind) or pa.types.is_timestamp(kind)):
            raise IqstateError(
                f"to_store({self.store!r}): column {name!r} ({argument}=) must hold timestamps "
                f"or integers of epoch milliseconds, got {kind}"
            )


def _units_to_ms(kind: pa.DataType) -> tuple[int, int]:
    """The `(multiplier, divisor)` taking times of `kind` (checked) to milliseconds."""
    return _MS_IN[kind.unit] if pa.types.is_timestamp(kind) else (1, 1)


def _array(column: pa.Array[Any] | pa.ChunkedArray[Any]) -> pa.Array[Any]:
    """One array of a table's (chunked) or a record batch's column."""
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def _python(arrow: Any) -> list[Any]:
    """Arrow values as Python, a map as the dict (JSON object) it reads as; as a list of
    pairs when its keys are structs or lists, which no dict can hold."""
    try:
        return cast("list[Any]", arrow.to_pylist(maps_as_pydicts="strict"))
    except TypeError:  # unhashable keys
        return cast("list[Any]", arrow.to_pylist())


def null_key(store: str, column: str) -> str:
    """Why a row with a null key is refused, as every write path says it."""
    return f"to_store({store!r}): a row has a null key (column {column!r}); every row needs a key"
