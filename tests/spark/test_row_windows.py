"""The embedded sink's check of each row's window against the store's window size, on
Arrow rows as Spark hands them over (no Spark needed): windows of another size are refused
naming it, and right-sized ones pass in every unit a window column may have."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from iqstate_spark.rows import RowColumns

from iqstate.errors import IqstateError

MINUTE_MS = 60_000


def rows(starts: list[Any], ends: list[Any], start_type: Any, end_type: Any) -> pa.Table:
    window = pa.StructArray.from_arrays(
        [pa.array(starts, start_type), pa.array(ends, end_type)], names=["start", "end"]
    )
    return pa.table({"k": [f"k{n}" for n in range(len(starts))], "window": window})


def columns() -> RowColumns:
    return RowColumns.of("w", "k", None, "window", None, window_size_ms=MINUTE_MS)


@pytest.mark.parametrize(
    ("kind", "per_ms"),
    [(pa.timestamp("us"), 1_000), (pa.timestamp("ns"), 1_000_000), (pa.int64(), 1)],
)
def test_windows_of_the_stores_size_pass_in_every_unit(kind: Any, per_ms: int) -> None:
    starts = [n * MINUTE_MS * per_ms for n in range(-2, 3)]  # before 1970 too
    table = rows(starts, [start + MINUTE_MS * per_ms for start in starts], kind, kind)
    assert columns().times(table) == [n * MINUTE_MS for n in range(-2, 3)]


def test_a_window_of_another_size_is_refused_naming_it() -> None:
    us = pa.timestamp("us")
    starts = [0, 60_000_000, 120_000_000]
    ends = [60_000_000, 70_000_000, 180_000_000]  # the second lasts 10 s
    with pytest.raises(
        IqstateError, match="window lasts 10000 ms .* the store's windows are 60000"
    ):
        columns().times(rows(starts, ends, us, us))


def test_windows_in_seconds_and_mixed_units_are_compared_in_milliseconds() -> None:
    seconds = pa.timestamp("s")
    assert columns().times(rows([0, 60], [60, 120], seconds, seconds)) == [0, MINUTE_MS]
    with pytest.raises(IqstateError, match="lasts 30000 ms"):
        columns().times(rows([0], [30], seconds, seconds))
    mixed = rows([0, 60_000], [60_000_000, 120_000_000], pa.int64(), pa.timestamp("us"))
    assert columns().times(mixed) == [0, MINUTE_MS]
    with pytest.raises(IqstateError, match="lasts 1000 ms"):
        columns().times(rows([0], [1_000_000], pa.int64(), pa.timestamp("us")))


def test_a_null_or_untyped_window_end_is_refused() -> None:
    us = pa.timestamp("us")
    with pytest.raises(IqstateError, match="null window end"):
        columns().times(rows([0], [None], us, us))
    with pytest.raises(IqstateError, match="must hold timestamps or integers"):
        columns().times(rows(["a"], ["b"], pa.string(), pa.string()))
