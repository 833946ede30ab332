"""The LMDB key-value store: one environment per store partition.

Sub-database `data` holds the user data; `offsets` holds one 8-byte offset per changelog
partition (`"<topic>-<partition>"`), the encoded position under `"position"` and the
open/closed marker under `"status"`. A commit is one write transaction across both,
fsynced when the store syncs commits. Opening refuses a missing, empty or truncated
environment (`iqstate_lmdb.environment`); LMDB's errors while reading become
`CorruptStateError` naming the environment.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from iqstate.codec import (
    encode_offset,
    encode_position,
    offset_key,
)
from iqstate.context import StateStoreContext
from iqstate.errors import IqstateError
from iqstate.persistent import (
    CLOSED,
    OPEN,
    POSITION_KEY,
    STATUS_KEY,
    Commit,
    Pair,
    PersistentKeyValueStore,
    StoredState,
)
from iqstate.persistent_window import PersistentWindowStore
from iqstate.runtime.lock import DirectoryLock
from iqstate.scanning import first_of, read_at_least, read_below
from iqstate.sealing import (
    FORMAT,
    FORMAT_KEY,
    seal,
    seal_pairs,
    unseal,
    unseal_at_least,
    unseal_below,
)
from iqstate_lmdb.environment import (
    DATA_DB,
    OFFSETS_DB,
    create_environment,
    damaged,
    lmdb_error,
    open_environment,
    write_error,
)
from iqstate_lmdb.map_guard import MapGuard
from iqstate_lmdb.options import LMDBSettings

T = TypeVar("T")
R = TypeVar("R")


class LMDBKeySizeError(IqstateError, ValueError):
    """A commit held a key LMDB cannot keep: empty, or longer than its maximum key size."""


class LMDBKeyValueStore(PersistentKeyValueStore):
    kind = "lmdb.key_value"
    atomic_commits = True  # one write transaction per commit

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._env: Any = None
        self._data: Any = None
        self._meta: Any = None
        self._lock: DirectoryLock | None = None
        self._reader: Any = None
        """A read transaction reused by key reads until the next commit."""
        self._reader_lock = threading.Lock()
        self._map_guard = MapGuard(self._closed_error, closed=True)
        """Other read transactions, counted so that the map grows (and the environment
        closes) only while none is open; closed (reads refused) until the store is open."""
        self._path = Path()

    @property
    def syncs_commits(self) -> bool:
        """Whether each commit is fsynced before it returns (survives power loss)."""
        return bool(self._env.flags()["sync"])

    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        settings = LMDBSettings.from_config(context.config, store=self.name)
        path = directory / "lmdb"
        map_size = settings.initial_map_mb * 1024 * 1024
        create_environment(path, map_size=map_size, max_readers=settings.max_readers)
        lock = DirectoryLock(path)
        lock.acquire()  # LMDB must not be opened twice, even within one process
        try:
            env = open_environment(
                path,
                map_size=map_size,
                max_readers=settings.max_readers,
                sync=settings.syncs(context.sync_commits),
            )
        except BaseException:
            lock.release()
            raise
        self._env, self._lock, self._path = env, lock, path
        try:
            self._data = env.open_db(DATA_DB)
            self._meta = env.open_db(OFFSETS_DB)
            with env.begin(db=self._meta) as txn:
                sealed = txn.get(FORMAT_KEY) == FORMAT
                status = txn.get(STATUS_KEY)
            if not sealed and status is not None:
                if status not in (OPEN, CLOSED):  # a sealed status: the store was written sealed
                    raise damaged(path, "lost the marker of its record format")
                self._in_write(self._seal_existing)
            with env.begin(db=self._meta) as txn:
                entries = [
                    (key, self._checked(key, value))
                    for key, value in txn.cursor()
                    if key != FORMAT_KEY
                ]
                holds_data = txn.stat(self._data)["entries"] > 0
            keys = {key for key, _ in entries}
            if STATUS_KEY not in keys:
                raise damaged(path, "has no status marker: it lost its committed state")
            if holds_data and POSITION_KEY not in keys:
                raise damaged(path, "holds data but no committed position: its offsets were lost")
            try:
                stored = StoredState.from_entries(entries)
            except ValueError as error:
                raise damaged(path, f"holds an unreadable offset or position ({error})") from error
            self._in_write(lambda txn: txn.put(STATUS_KEY, seal(STATUS_KEY, OPEN), db=self._meta))
        except lmdb.Error as error:
            self._release()
            raise lmdb_error(path, error) from error
        except BaseException:
            self._release()
            raise
        self._map_guard = MapGuard(self._closed_error)  # other threads' reads begin now
        return stored

    def _seal_existing(self, txn: Any) -> None:
        """Seal every value of a store written before values carried checksums."""
        for db in (self._data, self._meta):
            for key, value in list(txn.cursor(db=db)):
                if key != FORMAT_KEY:
                    txn.put(key, seal(key, value), db=db)
        txn.put(FORMAT_KEY, FORMAT, db=self._meta)

    def _checked(self, key: bytes, stored: bytes) -> bytes:
        """The value sealed in `stored`, or `CorruptStateError` when its checksum fails."""
        value = unseal(key, stored)
        if value is None:
            raise damaged(self._path, f"holds a damaged record (key {key[:40].hex()}...)")
        return value

    def _in_write(self, work: Callable[[Any], T]) -> T:
        """Run `work` in one write transaction, doubling the map when it is full."""
        while True:
            with contextlib.ExitStack() as growing:
                stopped = False
                try:
                    with self._env.begin(write=True) as txn:
                        try:
                            return work(txn)
                        except lmdb.MapFullError:
                            # Readers stop before the write transaction ends: its abort
                            # waits until no thread is inside an LMDB call, which readers
                            # that keep reading never let happen (py-lmdb 3).
                            self._stop_readers(growing)
                            stopped = True
                            raise
                except lmdb.MapFullError:
                    # (Full at the commit, the transaction ended already.) LMDB resizes
                    # only with no transaction of this process open: reads in
                    # transactions of their own end first and new ones wait
                    # (`_map_guard`); the reused one is ended, `_reader_lock` held so
                    # that none begins.
                    if not stopped:
                        self._stop_readers(growing)
                    self._end_reader()
                    self._env.set_mapsize(self._env.info()["map_size"] * 2)
                except lmdb.BadValsizeError:
                    raise  # a key LMDB cannot keep: the caller names it
                except lmdb.Error as error:  # a full disk, or damage the write met
                    raise write_error(self._path, error) from error

    def _stop_readers(self, until: contextlib.ExitStack) -> None:
        """Stop this process's reads of the map until `until` closes (see `_in_write`)."""
        until.enter_context(self._map_guard.growth())
        until.enter_context(self._reader_lock)

    def _drop_reader(self) -> None:
        """End the reused read transaction: after a commit or at a close."""
        with self._reader_lock:
            self._end_reader()

    def _end_reader(self) -> None:
        """End the reused read transaction (the caller holds `_reader_lock`)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.abort()

    def _release(self) -> None:
        # Reads of other threads in progress end first (closing unmaps what they read, a
        # read in place included), and later ones fail as reads of a closed store.
        with self._map_guard.closing(), self._reader_lock:
            self._end_reader()
            env, self._env = self._env, None
            if env is not None:
                env.close()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _close_storage(self, clean: bool) -> None:
        try:
            if clean and self._env is not None:
                closed = seal(STATUS_KEY, CLOSED)
                self._in_write(lambda txn: txn.put(STATUS_KEY, closed, db=self._meta))
        finally:
            self._release()

    def get(self, key: bytes) -> bytes | None:
        # The hottest path, written out: with no uncommitted writes a committed value is
        # read on the reused read transaction in this one call.
        if self._pending or not self._open:
            return super().get(key)  # the overlay answers first; a closed store raises
        reader_lock = self._reader_lock
        if not reader_lock.acquire(False):
            return self._read(key)
        try:
            stored: bytes | None = (self._reader or self._begin_reader()).get(key)
            if stored is None:
                self._check_neighbours(self._reader, key)
                return None
        except lmdb.BadValsizeError:
            return None  # a key LMDB cannot hold (empty, or too long): held by no store
        except lmdb.Error as error:
            raise self._failed_reader(error) from error
        finally:
            reader_lock.release()
        value = unseal(key, stored)
        return self._checked(key, stored) if value is None else value

    def _begin_reader(self) -> Any:
        """Begin the reused read transaction (the caller holds `_reader_lock`)."""
        if self._env is None or self._map_guard.closed:  # closed meanwhile, or not open yet
            raise self._closed_error()
        self._reader = self._env.begin(db=self._data)
        return self._reader

    def _failed_reader(self, error: lmdb.Error) -> Exception:
        """End the reused read transaction after `error` (LMDB invalidates a transaction
        that met one) and return the error to raise (the caller holds `_reader_lock`)."""
        self._end_reader()
        return lmdb_error(self._path, error)

    def _read(self, key: bytes) -> bytes | None:
        # Key reads reuse one read transaction between commits: beginning a transaction
        # costs more than the look-up. A thread finding it in use begins its own.
        reader_lock = self._reader_lock
        if reader_lock.acquire(False):
            try:
                reader = self._reader or self._begin_reader()
                stored: bytes | None = reader.get(key)
                if stored is None:
                    self._check_neighbours(reader, key)
            except lmdb.BadValsizeError:
                stored = None  # a key LMDB cannot hold: held by no store
            except lmdb.Error as error:
                raise self._failed_reader(error) from error
            finally:
                reader_lock.release()
        else:
            try:
                with self._map_guard, self._env.begin(db=self._data) as txn:
                    stored = txn.get(key)
                    if stored is None:
                        self._check_neighbours(txn, key)
            except lmdb.BadValsizeError:
                stored = None
            except lmdb.Error as error:
                raise lmdb_error(self._path, error) from error
        if stored is None:
            return None
        value = unseal(key, stored)
        return self._checked(key, stored) if value is None else value

    def _check_neighbours(self, txn: Any, key: bytes) -> None:
        """Check the records around a missing key: a key whose stored bytes were damaged is
        missing too, and its record, with its checksum, sits where the key would be."""
        cursor = txn.cursor()
        found = cursor.set_range(key)
        if found:
            self._checked(cursor.key(), cursor.value())
        if cursor.prev() if found else cursor.last():
            self._checked(cursor.key(), cursor.value())

    def _scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool
    ) -> list[Pair]:
        return self._scan_limited(lower, upper, reverse, upper_inclusive, None)

    def _scan_limited(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        upper_inclusive: bool,
        limit: int | None,
    ) -> list[Pair]:
        """The range's records, or its first `limit`, each checked and unsealed."""
        try:
            values = self._cursor_scan(
                lower, upper, reverse, upper_inclusive, limit, unseal_below, unseal_at_least
            )
            if values is None:
                # A record failed its checksum: read the range as stored, checking each
                # record, to raise naming it (or, if a commit replaced it meanwhile, to
                # answer with the range as it now is).
                stored = self._cursor_scan(
                    lower, upper, reverse, upper_inclusive, limit, read_below, read_at_least
                )
                values = [(key, self._checked(key, value)) for key, value in stored]
        except lmdb.Error as error:
            raise lmdb_error(self._path, error) from error
        return values

    def _cursor_scan(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        upper_inclusive: bool,
        limit: int | None,
        below: Callable[[Iterator[Pair], bytes | None, bool], R],
        at_least: Callable[[Iterator[Pair], bytes | None], R],
    ) -> R | list[Pair]:
        """The records in the range (its first `limit`, when given): the cursor placed at
        its near end, then `below` or `at_least` reading its C-level iterator to the far
        end (`unseal_below` and `unseal_at_least` check and unseal them; `read_below` and
        `read_at_least` give them as stored)."""
        with self._map_guard, self._env.begin(db=self._data) as txn:
            cursor = txn.cursor()
            if reverse:
                if upper is None:
                    found = cursor.last()
                elif cursor.set_range(upper):
                    key = cursor.key()
                    found = (
                        cursor.prev()
                        if key > upper or (key == upper and not upper_inclusive)
                        else True
                    )
                else:
                    found = cursor.last()
                return at_least(first_of(cursor.iterprev(), limit), lower) if found else []
            found = cursor.set_range(lower) if lower is not None else cursor.first()
            return (
                below(first_of(cursor.iternext(), limit), upper, upper_inclusive) if found else []
            )

    def read_stored(self, lower: bytes, read: Callable[[Iterator[Pair]], R]) -> R | None:
        """`read` applied to the committed records from `lower` on, ascending, as stored:
        each value followed by its seal (`iqstate.sealing`), key and value memoryviews into
        the map, valid during the call only (no value copied out). None while a batch's
        writes are pending: the stored records are not the store's content then."""
        self._check_open()
        if self._pending:
            return None
        try:
            with self._map_guard, self._env.begin(db=self._data, buffers=True) as txn:
                cursor = txn.cursor()
                return read(cursor.iternext() if cursor.set_range(lower) else iter(()))
        except lmdb.Error as error:
            raise lmdb_error(self._path, error) from error

    def _count(self) -> int:
        with self._map_guard, self._env.begin(db=self._data) as txn:
            return int(txn.stat(self._data)["entries"])

    def _write(self, commit: Commit) -> None:
        data, meta = self._data, self._meta
        changes = seal_pairs(commit.changes.items())
        offsets = [
            (key, seal(key, encode_offset(offset)))
            for key, offset in ((offset_key(p), o) for p, o in commit.offsets.items())
        ]
        position = seal(POSITION_KEY, encode_position(commit.position))

        def apply(txn: Any) -> None:
            for key, value in changes:
                if value is None:
                    txn.delete(key, db=data)
                else:
                    txn.put(key, value, db=data)
            for partition in commit.removed_offsets:
                txn.delete(offset_key(partition), db=meta)
            for key, value in offsets:
                txn.put(key, value, db=meta)
            txn.put(POSITION_KEY, position, db=meta)

        try:
            self._in_write(apply)
        except lmdb.BadValsizeError as error:
            raise self._unstorable(changes) from error
        self._drop_reader()  # later reads see this commit

    def _unstorable(self, changes: list[tuple[bytes, bytes | None]]) -> Exception:
        """The error for a commit LMDB refused for a key's size (nothing was written): the
        files are fine, the data cannot be kept by this engine."""
        most = self._env.max_key_size()
        sizes = sorted({len(key) for key, _ in changes if not 0 < len(key) <= most})
        return LMDBKeySizeError(
            f"LMDB environment {self._path} cannot keep keys of {sizes} bytes: LMDB keys "
            f"are 1 to {most} bytes (an empty key, or a longer one, as the engine stores "
            "it). Nothing of this commit was written and the store's files are fine; use "
            "another engine (rocksdb, sqlite) for such keys, or shorter keys"
        )

    def map_size(self) -> int:
        return int(self._env.info()["map_size"])


class LMDBWindowStore(PersistentWindowStore):
    """Window store sharing the lmdb key-value store's storage, commits and offsets."""

    kind = "lmdb.window"
    key_value_class = LMDBKeyValueStore
