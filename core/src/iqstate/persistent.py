"""`PersistentKeyValueStore`: the store contract for engines that keep data on disk.

An engine subclasses it and writes only its storage primitives (open, read one key, scan a
range, write one atomic commit, close). This class gives it the rest of the contract:

* uncommitted writes live in an in-memory overlay that reads see at once; `commit` hands
  the overlay, the changelog offsets and the position to the engine's single atomic write,
  so after a crash the store holds exactly the last commit. A commit that fails discards
  the overlay and the position's advance: reads never see what was not committed, and a
  retry starts from the last commit (a write the engine cannot keep does not stay behind
  to fail every later commit);
* offsets follow KIP-1035 (`None` removes one, an empty mapping removes all) and are kept
  by the store (`manages_offsets = True`);
* an open/closed status marker tells a clean close from a crash. An engine whose `_write`
  is atomic declares `atomic_commits = True` and is used as it is after a crash: its files
  hold exactly the last commit. Under exactly-once, an engine that cannot promise that
  raises `UncleanShutdownError` at init after a crash (the runtime rebuilds it from its
  changelog, or refuses to start); under at-least-once it opens as is;
* legacy `.checkpoint` / `.position` files left by the runtime are migrated into the store
  at init and deleted;
* range results are copied when created, so an iterator never sees later commits.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from iqstate.codec import decode_offset, decode_position, parse_offset_key
from iqstate.context import StateStoreContext
from iqstate.engine_store import EngineStore, apply_offset_changes
from iqstate.errors import IqstateError
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import prefix_upper_bound
from iqstate.offset_files import CHECKPOINT_FILE, POSITION_FILE, read_legacy_state
from iqstate.position import Position, TopicPartition
from iqstate.storage_failures import machine_failures
from iqstate.store import KeyValueStore

Pair = tuple[bytes, bytes]


class UncleanShutdownError(IqstateError):
    """A store without atomic commits was not closed cleanly: under exactly-once it must be
    rebuilt from its changelog."""


STATUS_KEY = b"status"
UNTRUSTED_REMEDY = (
    "Its committed data cannot be trusted as it is. Restore the directory from a backup; "
    "a store with a changelog is rebuilt from it at the next start; otherwise move the "
    "directory away and replay the pipeline's batches into the empty partition"
)
"""What an engine's `CorruptStateError` tells the operator to do with a damaged store."""
POSITION_KEY = b"position"
OPEN, CLOSED = b"\x01", b"\x00"
"""Reserved keys and status values of an offsets key space laid out as Kafka's RocksDB
store lays out its `offsets` column family: `"<topic>-<partition>"` -> 8-byte offset,
`"position"` -> encoded position, `"status"` -> open or closed."""


@dataclass
class StoredState:
    """What an engine read back from its storage at open."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    position: Position = field(default_factory=Position.empty)
    was_open: bool = False

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[bytes, bytes]]) -> StoredState:
        """Read an offsets key space with the reserved keys above."""
        stored = cls()
        for key, value in entries:
            if key == STATUS_KEY:
                stored.was_open = value == OPEN
            elif key == POSITION_KEY:
                stored.position = decode_position(value)
            else:
                stored.offsets[parse_offset_key(key)] = decode_offset(value)
        return stored


@dataclass(frozen=True)
class Commit:
    """One atomic write: data changes, the full offsets after it, removed offsets, position."""

    changes: Mapping[bytes, bytes | None]
    offsets: Mapping[TopicPartition, int]
    removed_offsets: frozenset[TopicPartition]
    position: Position


class PersistentKeyValueStore(EngineStore, KeyValueStore[bytes, bytes]):
    """Base class of on-disk key-value engines; see the module docstring."""

    persistent = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._pending: dict[bytes, bytes | None] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._committed_position = Position.empty()
        """The position of the last commit (or the one opened)."""

    @property
    def manages_offsets(self) -> bool:
        return True

    # -- storage primitives, written by each engine -------------------------------------------

    @abstractmethod
    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        """Open (creating if needed) the storage in `directory`, mark it open, read state."""

    @abstractmethod
    def _close_storage(self, clean: bool) -> None:
        """Release the storage; mark it closed first iff `clean`."""

    @abstractmethod
    def _read(self, key: bytes) -> bytes | None:
        """The committed value of `key`."""

    @abstractmethod
    def _scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool
    ) -> list[Pair]:
        """The committed pairs in the range, ordered, copied out of the storage."""

    def _scan_limited(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        upper_inclusive: bool,
        limit: int,
    ) -> list[Pair]:
        """The first `limit` committed pairs of the range; engines that can stop reading
        early override this default, which scans the whole range (an override may take
        `None` for no limit and serve `_scan` too, as RocksDB, LMDB and SQLite do)."""
        return self._scan(lower, upper, reverse, upper_inclusive)[:limit]

    @abstractmethod
    def _count(self) -> int:
        """An estimate of the committed entries."""

    @abstractmethod
    def _write(self, commit: Commit) -> None:
        """Apply `commit` atomically: all of it or none of it survives a crash."""

    # -- lifecycle ------------------------------------------------------------------------------

    def init(self, context: StateStoreContext) -> None:
        if context.directory is None:
            raise IqstateError(
                f"{self.kind} store {self.name!r} is persistent and needs a directory"
            )
        super().init(context)
        self._pending = {}
        # The engine's own checks name what they find; a directory this process may not
        # enter (say) reaches here as the operating system's error.
        opening = f"{self.kind} store {self.name!r} partition {context.partition} in " \
            f"{context.directory} could not be opened"  # fmt: skip
        try:
            with machine_failures(opening):
                stored = self._open_storage(context.directory, context)
        except BaseException:
            self._open = False
            raise
        if (
            stored.was_open
            and not self.atomic_commits
            and context.processing_guarantee == "exactly_once"
        ):
            self._close_storage(clean=False)
            self._open = False
            raise UncleanShutdownError(
                f"{self.kind} store {self.name!r} partition {context.partition} in "
                f"{context.directory} was not closed cleanly and its engine does not promise "
                "atomic commits; under exactly-once it must be rebuilt from its changelog"
            )
        self._offsets = dict(stored.offsets)
        self.current_position = self._committed_position = stored.position
        self._migrate_legacy_files(context.directory)

    def _migrate_legacy_files(self, directory: Path) -> None:
        legacy = read_legacy_state(directory)
        if legacy is None:
            return
        offsets, position = legacy
        self.current_position = self.current_position.merge(position)
        # The files only fill in what the store lacks: after a crash between the commit
        # and the unlinks below they are what the store already holds, or, without the
        # checkpoint, nothing (committing `{}` would clear every offset, fence included).
        self.commit({**offsets, **self._offsets})
        for name in (CHECKPOINT_FILE, POSITION_FILE):
            (directory / name).unlink(missing_ok=True)

    def close(self) -> None:
        if self._open:
            self._pending = {}
            self._close_storage(clean=True)
        super().close()

    def abandon(self) -> None:
        """Release the store without committing or marking it closed, as a killed process would."""
        if self._open:
            self._pending = {}
            self._close_storage(clean=False)
        super().close()

    # -- data operations ------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        if not self._open:
            self._check_open()
        pending = self._pending
        if key in pending:
            return pending[key]
        return self._read(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self._open:
            self._check_open()
        self._pending[key] = value

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        self._check_open()
        self._pending.update(entries)

    def delete(self, key: bytes) -> bytes | None:
        old = self.get(key)
        self._pending[key] = None
        return old

    def _range(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool = True
    ) -> KeyValueIterator[bytes, bytes]:
        self._check_open()
        stored = self._scan(lower, upper, reverse, upper_inclusive)
        if not self._pending:
            return KeyValueIterator.of_rows(stored)
        merged = dict(stored)
        for key, value in self._pending.items():
            if (lower is None or key >= lower) and (
                upper is None or key < upper or (upper_inclusive and key == upper)
            ):
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        return KeyValueIterator.of_rows(sorted(merged.items(), reverse=reverse))

    def range(self, lower: bytes | None, upper: bytes | None) -> KeyValueIterator[bytes, bytes]:
        return self._range(lower, upper, False)

    def limited_range(
        self, lower: bytes | None, upper: bytes | None, limit: int, reverse: bool = False
    ) -> KeyValueIterator[bytes, bytes]:
        self._check_open()
        if self._pending:  # writes of a batch in progress: merged into the whole range
            with self._range(lower, upper, reverse) as pairs:
                return KeyValueIterator.of_rows(list(islice(pairs, limit)))
        return KeyValueIterator.of_rows(self._scan_limited(lower, upper, reverse, True, limit))

    def reverse_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> KeyValueIterator[bytes, bytes]:
        return self._range(lower, upper, True)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        upper = prefix_upper_bound(prefix)
        return self._range(prefix, upper, False, upper_inclusive=upper is None)

    def approximate_num_entries(self) -> int:
        self._check_open()
        return self._count() + sum(1 for value in self._pending.values() if value is not None)

    # -- commits and offsets ----------------------------------------------------------------------

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self._check_open()
        self.check_offsets(changelog_offsets)
        offsets = dict(self._offsets)
        apply_offset_changes(offsets, changelog_offsets)
        removed = frozenset(self._offsets) - frozenset(offsets)
        position = self.current_position
        try:
            self._write(Commit(self._pending, offsets, removed, position))
        except BaseException:  # discarded: never read, nor committed by a later commit
            self._pending = {}
            self.current_position = self._committed_position
            raise
        self._pending = {}
        self._offsets, self._committed_position = offsets, position

    def committed_offset(self, partition: TopicPartition) -> int | None:
        return self._offsets.get(partition)
