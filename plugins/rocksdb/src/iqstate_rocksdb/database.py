"""Opening a partition's RocksDB database so that damage is refused, never served or purged.

* A database is created whole: built in a staging directory (with its offsets column
  family and a status marker) and renamed into place, so an existing directory is always a
  complete database and is opened without `create_if_missing`.
* Before the read-write open, a read-only open inspects it. RocksDB deletes table files
  its MANIFEST does not reference when it opens read-write; after a clean close there are
  none, so finding some means the MANIFEST lost updates (truncated or replaced), and
  opening would delete committed data. A database without a status marker lost its state.
* Iteration checks the iterator's status at the end: RocksDB ends an iteration early at a
  damaged block, which looks exactly like the end of the range.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocksdict import AccessType, Rdict, ReadOptions, WriteBatch

from iqstate.files import create_directory_whole
from iqstate.persistent import CLOSED, STATUS_KEY
from iqstate_rocksdb.errors import damaged, database_error
from iqstate_rocksdb.options import RocksDBSettings, write_options

OFFSETS_CF = "offsets"

Pair = tuple[bytes, bytes]


def open_database(path: Path, settings: RocksDBSettings) -> Rdict:
    """Open the database at `path` read-write, creating it first if the directory is absent."""
    if not path.exists():
        _create(path, settings)
    _inspect(path, settings)
    return _open(path, settings, create=False)


def checked_items(
    db: Any,
    path: Path,
    lower: bytes | None = None,
    upper: bytes | None = None,
    *,
    reverse: bool = False,
    upper_inclusive: bool = False,
) -> list[Pair]:
    """The pairs of `db` (an `Rdict` or a column family) in the range, ordered, copied out.

    Raises `CorruptStateError` naming the damaged file when RocksDB stopped at damage.
    """
    # The upper bound is RocksDB's; the lower one is a seek and a check, because rocksdict's
    # `ReadOptions.set_iterate_lower_bound` sets the upper bound (rocksdict 0.3.29).
    options = ReadOptions()
    if upper is not None:
        options.set_iterate_upper_bound(upper + b"\x00" if upper_inclusive else upper)
    pairs: list[Pair] = []
    append = pairs.append
    try:
        iterator = db.iter(options)
        valid, key, value = iterator.valid, iterator.key, iterator.value
        if reverse:
            iterator.seek_to_last()
            step = iterator.prev
            while valid():
                found = key()
                if lower is not None and found < lower:
                    break
                append((found, value()))
                step()
        else:
            if lower is None:
                iterator.seek_to_first()
            else:
                iterator.seek(lower)
            step = iterator.next
            while valid():
                append((key(), value()))
                step()
        iterator.status()
    except Exception as error:
        raise database_error(path, error) from error
    return pairs


def holds_data(db: Rdict, path: Path) -> bool:
    """Whether the default column family holds any key (damage raises, as in a scan)."""
    try:
        iterator = db.iter()
        iterator.seek_to_first()
        if iterator.valid():
            return True
        iterator.status()
    except Exception as error:
        raise database_error(path, error) from error
    return False


def _open(path: Path, settings: RocksDBSettings, *, create: bool, **access: Any) -> Rdict:
    try:
        return Rdict(
            str(path),
            options=settings.db_options(create=create),
            column_families={OFFSETS_CF: settings.offsets_options()},
            **access,
        )
    except Exception as error:
        raise database_error(path, error) from error


def _create(path: Path, settings: RocksDBSettings) -> None:
    """Build a new database beside `path` and rename it into place once complete."""

    def build(staging: Path) -> None:
        db = _open(staging, settings, create=True)
        try:
            mark = WriteBatch(raw_mode=True)
            mark.put(STATUS_KEY, CLOSED, db.get_column_family_handle(OFFSETS_CF))
            db.write(mark, write_options(sync=True))
        finally:
            db.close()

    create_directory_whole(path, build)


def _inspect(path: Path, settings: RocksDBSettings) -> None:
    """Refuse a database whose read-write open would delete or hide committed data."""
    db = _open(path, settings, create=False, access_type=AccessType.read_only(False))
    try:
        try:
            status = db.get_column_family(OFFSETS_CF).get(STATUS_KEY)
            live = {entry["name"].lstrip("/") for entry in db.live_files()}
        except Exception as error:
            raise database_error(path, error) from error
    finally:
        db.close()
    if status is None:
        raise damaged(path, "has no status marker: it lost its committed state")
    unreferenced = sorted(table.name for table in path.glob("*.sst") if table.name not in live)
    if unreferenced and status == CLOSED:
        raise damaged(
            path,
            f"holds table files its MANIFEST does not reference ({', '.join(unreferenced)}) "
            "although it was closed cleanly: the MANIFEST lost updates, and opening the "
            "database would delete those files",
        )
