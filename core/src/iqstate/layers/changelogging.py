"""The change-logging layer: every write also goes to the store partition's changelog.

Each record carries the store's position after the write, so a replica that applies
the changelog ends at the same position as the store that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable

from iqstate.changelog import ChangelogRecord, ChangelogWriter, changelog_topic
from iqstate.context import StateStoreContext
from iqstate.errors import IqstateError
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import encode_window_key
from iqstate.layers.wrapped import WrappedStore
from iqstate.position import TopicPartition
from iqstate.queries import Windowed
from iqstate.store import KeyValueStore, StateStore, WindowStore


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
    """Logs window writes with the key `key + window start` (see `iqstate.keyspace`)."""

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

    def put(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self.wrapped.put(key, value, window_start)
        self._writer.send(
            ChangelogRecord(
                self._changelog, encode_window_key(key, window_start), value, self.wrapped.position
            )
        )

    def fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator[int, bytes]:
        return self.wrapped.fetch(key, time_from, time_to)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[bytes], bytes]:
        return self.wrapped.fetch_all(time_from, time_to)
