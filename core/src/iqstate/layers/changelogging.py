"""The change-logging layer: every write also goes to the store partition's changelog.

Each record carries the store's position after the write, so a replica that applies
the changelog ends at the same position as the store that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from iqstate.changelog import ChangelogRecord, ChangelogWriter, changelog_topic
from iqstate.context import StateStoreContext
from iqstate.errors import IqstateError
from iqstate.expiring_versions import expired_now, versions_expiring
from iqstate.iterators import KeyValueIterator
from iqstate.kept_puts import (
    expired_by_records,
    kept_sessions,
    kept_versions,
    kept_windows,
    only_kept,
)
from iqstate.keyspace import encode_window_key
from iqstate.layers.wrapped import WrappedStore
from iqstate.position import Position, TopicPartition
from iqstate.queries import VersionedRecord, Windowed
from iqstate.session_store import encode_session_key
from iqstate.store import (
    KeyValueStore,
    SessionStore,
    StateStore,
    VersionedKeyValueStore,
    WindowStore,
)
from iqstate.versioned_store import encode_version_record, version_key


class _ChangeLogging:
    """The writer and changelog partition a change-logging layer sends to."""

    _writer: ChangelogWriter
    _changelog: TopicPartition

    def _attach(self, store: StateStore, context: StateStoreContext) -> None:
        if context.changelog_writer is None:
            raise IqstateError(
                f"store {store.name!r} partition {context.partition} has logging enabled but "
                "its context has no changelog writer"
            )
        self._writer = context.changelog_writer
        self._changelog = context.changelog_partition or TopicPartition(
            changelog_topic(context.application_id, store.name), context.partition
        )

    @property
    def changelog_partition(self) -> TopicPartition:
        return self._changelog

    def _log_expiring(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        expired: list[bytes],
        position: Position,
    ) -> None:
        """Log a window, session or versioned store's kept writes, then a tombstone for each
        record key the batch expired: the store dropped them, and without a tombstone
        compaction would keep them in the changelog for ever (each window, session and
        version is a key of its own). The tombstones come last, after a write of the same
        batch to a window it expired."""
        send, changelog = self._writer.send, self._changelog
        for key, value in records:
            send(ChangelogRecord(changelog, key, value, position))
        for key in dict.fromkeys(expired):
            send(ChangelogRecord(changelog, key, None, position))


class ChangeLoggingKeyValueStore(
    WrappedStore[KeyValueStore[bytes, bytes]], _ChangeLogging, KeyValueStore[bytes, bytes]
):
    kind = "logging.key_value"

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._attach(self, context)

    def _log(self, key: bytes, value: bytes | None) -> None:
        self._writer.send(ChangelogRecord(self._changelog, key, value, self.wrapped.position))

    def get(self, key: bytes) -> bytes | None:
        return self.wrapped.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.wrapped.put(key, value)
        self._log(key, value)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        batch = list(entries)
        self.wrapped.put_all(batch)
        for key, value in batch:
            self._log(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self.wrapped.delete(key)
        self._log(key, None)
        return old

    def range(self, lower: bytes | None, upper: bytes | None) -> KeyValueIterator[bytes, bytes]:
        return self.wrapped.range(lower, upper)

    def reverse_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> KeyValueIterator[bytes, bytes]:
        return self.wrapped.reverse_range(lower, upper)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        return self.wrapped.prefix_scan(prefix)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()


class ChangeLoggingWindowStore(
    WrappedStore[WindowStore[bytes, bytes]], _ChangeLogging, WindowStore[bytes, bytes]
):
    """Logs the window writes the store keeps, with the key `key + window start` (see
    `iqstate.keyspace`); a window already expired is dropped by the store and not logged."""

    kind = "logging.window"

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._attach(self, context)

    @property
    def window_size_ms(self) -> int:
        return self.wrapped.window_size_ms

    @property
    def retention_ms(self) -> int:
        return self.wrapped.retention_ms

    def keeps(self, window_start: int) -> bool:
        return self.wrapped.keeps(window_start)

    def put(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self.put_all([(key, window_start, value)])

    def put_all(self, entries: Iterable[tuple[bytes, int, bytes | None]]) -> None:
        batch = list(entries)
        if not batch:
            return
        wrapped = self.wrapped
        starts = [start for _, start, _ in batch]
        # one keeps() in the usual case, where the store keeps every window
        logged = only_kept(batch, kept_windows(wrapped, starts))
        records = [(encode_window_key(k, s), v) for k, s, v in logged]
        # what the store holds that the batch expires, and what it writes and expires
        logged_starts = starts if len(logged) == len(batch) else [s for _, s, _ in logged]
        expired = expired_by_records(wrapped, records, logged_starts, encode_window_key)
        wrapped.put_all(batch)
        self._log_expiring(records, expired, wrapped.position)

    def fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator[int, bytes]:
        return self.wrapped.fetch(key, time_from, time_to)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[bytes], bytes]:
        return self.wrapped.fetch_all(time_from, time_to)


class ChangeLoggingVersionedStore(
    WrappedStore[VersionedKeyValueStore[bytes, bytes]],
    _ChangeLogging,
    VersionedKeyValueStore[bytes, bytes],
):
    """Logs each version with the key `key + timestamp` and the value `flag + value`
    (`iqstate.versioned_store.encode_version_record`): one record per version, so compaction
    never drops a version another record of the key came after."""

    kind = "logging.versioned"

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._attach(self, context)

    @property
    def history_retention_ms(self) -> int:
        return self.wrapped.history_retention_ms

    def keeps(self, timestamp: int) -> bool:
        return self.wrapped.keeps(timestamp)

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self.put_all([(key, timestamp, value)])

    def put_all(self, entries: Iterable[tuple[bytes, int, bytes | None]]) -> None:
        batch = list(entries)
        if not batch:
            return
        wrapped = self.wrapped
        stamps = [timestamp for _, timestamp, _ in batch]
        # Dropped puts are not logged: one could replace the kept version of the same key
        # and time on compaction, and a replica restoring would drop it.
        kept = kept_versions(wrapped, stamps)
        expired = versions_expiring(wrapped, batch)
        wrapped.put_all(batch)
        records = [encode_version_record(k, t, v) for k, t, v in only_kept(batch, kept)]
        # never one for a version held (the batch may have written it again)
        tombstoned = [version_key(key, stamp) for key, stamp in expired_now(wrapped, expired)]
        self._log_expiring(records, tombstoned, wrapped.position)

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None:
        return self.wrapped.get(key, as_of)

    def latest_version(self, key: bytes) -> tuple[int, bytes | None] | None:
        return self.wrapped.latest_version(key)

    def versions(
        self, key: bytes, time_from: int | None, time_to: int | None, ascending: bool
    ) -> list[VersionedRecord[bytes]]:
        return self.wrapped.versions(key, time_from, time_to, ascending)

    def range_as_of(
        self, lower: bytes | None, upper: bytes | None, as_of: int | None, limit: int | None = None
    ) -> KeyValueIterator[bytes, VersionedRecord[bytes]]:
        return self.wrapped.range_as_of(lower, upper, as_of, limit)

    def current_in_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> list[tuple[bytes, int, bytes | None]]:
        return self.wrapped.current_in_range(lower, upper)


class ChangeLoggingSessionStore(
    WrappedStore[SessionStore[bytes, bytes]], _ChangeLogging, SessionStore[bytes, bytes]
):
    """Logs the session writes the store keeps, with the key `key + start + end`
    (`encode_session_key`); a session already expired is dropped by the store and not logged."""

    kind = "logging.session"

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._attach(self, context)

    @property
    def retention_ms(self) -> int:
        return self.wrapped.retention_ms

    def keeps(self, end_ms: int) -> bool:
        return self.wrapped.keeps(end_ms)

    def put(self, key: bytes, value: bytes | None, start_ms: int, end_ms: int) -> None:
        self.put_all([(key, start_ms, end_ms, value)])

    def put_all(self, entries: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        batch = list(entries)
        if not batch:
            return
        wrapped = self.wrapped
        ends = [end for _, _, end, _ in batch]
        # one keeps() in the usual case, where the store keeps every session
        logged = only_kept(batch, kept_sessions(wrapped, ends))
        records = [(encode_session_key(k, s, e), v) for k, s, e, v in logged]
        # what the store holds that the batch expires, and what it writes and expires
        logged_ends = ends if len(logged) == len(batch) else [e for _, _, e, _ in logged]
        expired = expired_by_records(wrapped, records, logged_ends, encode_session_key)
        wrapped.put_all(batch)
        self._log_expiring(records, expired, wrapped.position)

    def fetch_sessions(
        self, key: bytes | None, time_from: int, time_to: int
    ) -> KeyValueIterator[Windowed[bytes], bytes]:
        return self.wrapped.fetch_sessions(key, time_from, time_to)
