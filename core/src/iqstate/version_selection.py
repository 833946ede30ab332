"""The inner loops of versioned reads: the version a timeline holds at a time, for one key
or a whole scanned chunk, and the `VersionedRecord`s of the answer.

Each is `iqstate_speedups.versions`' where that extension is installed (one C call per
lookup or per chunk; the records made without a Python `__init__` per row, which was a
third of an as-of range's time), and the same in Python otherwise: same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from iqstate.queries import VersionedRecord
from iqstate.version_history import Found
from iqstate.version_history import found_at as found_at_in_python

FoundLists = tuple[list[bytes], list[bytes], list[int], list[int | None]]
"""Keys, and the values, timestamps and ends of validity of the versions found for them."""


def select_found_in_python(
    rows: Sequence[tuple[bytes, bytes]],
    as_of: int | None,
    boundary: int,
    wanted: int | None,
    found: FoundLists,
) -> None:
    """Append to `found` each row's key (less its one-byte key-space prefix) and the version
    its timeline holds at `as_of` (`found_at`), skipping rows with none; at most `wanted`
    of them (None: no limit)."""
    keys, values, stamps, valid_tos = found
    left = -1 if wanted is None else wanted
    for key, timeline in rows:
        if not left:
            return
        version = found_at_in_python(timeline, as_of, boundary)
        if version is not None:
            keys.append(key[1:])
            values.append(version[0])
            stamps.append(version[1])
            valid_tos.append(version[2])
            left -= 1


def rows_in_python(
    keys: list[Any], values: list[Any], stamps: list[int], valid_tos: list[int | None]
) -> list[tuple[Any, VersionedRecord[Any]]]:
    """`(key, VersionedRecord(value, timestamp, valid_to))` of each position of the lists."""
    return list(zip(keys, map(VersionedRecord, values, stamps, valid_tos), strict=True))


SealedSelection = Callable[
    [Iterable[tuple[Any, Any]], bytes | None, int, int | None, int, int | None, FoundLists],
    tuple[int, bytes | None] | None,
]
"""`select_sealed(records, upper, limit, as_of, boundary, wanted, found)`: `select_found`
over records as a sealing engine stores them (`iqstate.sealing`), read in place (bytes or
memoryviews into its map): at most `limit`, up to `upper` inclusive, each checksum checked.
It gives `(records read, the last one's key)`, or None when a checksum fails."""


def _compiled() -> tuple[
    Callable[[Sequence[tuple[bytes, bytes]], int | None, int, int | None, FoundLists], None],
    Callable[[bytes, int | None, int], Found | None],
    Callable[[Any, int, int | None], VersionedRecord[Any]],
    Callable[[list[Any], list[Any], list[int], list[int | None]], list[Any]],
    SealedSelection | None,
]:
    """The compiled loops, or the Python ones where the extension is missing or cannot make
    `VersionedRecord`s (a class laid out otherwise than it expects). The selection over
    sealed timelines is compiled only: without it an engine unseals its timelines first."""
    try:
        from iqstate_speedups import versions

        versions.bind_record_type(VersionedRecord)
    except (ImportError, TypeError):
        return select_found_in_python, found_at_in_python, VersionedRecord, rows_in_python, None
    return (
        versions.select_found,
        versions.found_at,
        versions.record,  # type: ignore[return-value]
        versions.rows,
        versions.select_sealed,
    )


select_found, found_at, versioned_record, versioned_rows, select_sealed = _compiled()
COMPILED = select_found is not select_found_in_python
"""Whether the compiled loops are in use."""
