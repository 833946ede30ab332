"""`Batch`: the writes of one pipeline batch, applied to every store partition atomically.

Writes are serialized and partitioned as they are added (a key or value the serdes
refuse fails at once, before anything is applied) and held until the block ends. Then
every running active store partition of the application commits its writes, the batch's
position and the batch id as its fence, in one store commit each. A partition whose fence
is at or past the batch id skips it, so replaying a batch that a crash interrupted
completes it where it was missing and changes nothing where it was applied.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from iqstate.errors import UnknownStateStoreError
from iqstate.position import Position
from iqstate.runtime.spec import NO_EXTRAS, PutExtras, StoreSpec
from iqstate.serdes import Serde, encoding_error
from iqstate.times import Time

StorePartition = tuple[str, int]


class BatchTarget(Protocol):
    """What a batch needs from the application: the declared stores, and a commit."""

    @property
    def stores(self) -> Mapping[str, StoreSpec]: ...

    def commit_batch(
        self, batch: Batch
    ) -> tuple[frozenset[StorePartition], frozenset[StorePartition]]:
        """Apply `batch`; the store partitions that applied it and those that skipped it."""
        ...


class _StoreWriter:
    """Serializes and partitions writes for one store (built once per store per batch)."""

    __slots__ = ("entries", "key_serialize", "spec", "value_serialize")

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.key_serialize = spec.key_serde.serialize
        self.value_serialize = spec.value_serde.serialize
        self.entries: dict[int, list[Any]] = {}

    def key_bytes(self, key: Any) -> bytes:
        try:
            data = self.key_serialize(key)
        except Exception as exc:
            raise encoding_error(self.spec.name, self.spec.key_serde, key, "key", exc) from exc
        if self.spec.key_sizes is not None:
            problem = self.spec.key_size_problem(len(data))
            if problem is not None:
                raise ValueError(f"{problem} (key {key!r:.60})")
        return data

    def value_bytes(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return self.value_serialize(value)
        except Exception as exc:
            raise encoding_error(
                self.spec.name, self.spec.value_serde, value, "value", exc
            ) from exc


_open_batches = threading.local()
"""`targets`: the ids of the applications with a batch open in this thread."""


class Batch:
    """A context manager collecting one batch's writes; see `Application.begin_batch`."""

    def __init__(
        self,
        target: BatchTarget,
        position: Position | None,
        batch_id: int | None,
        stores: frozenset[str] | None = None,
        *,
        allow_gaps: bool = False,
        first_batch_id: int | None = None,
    ) -> None:
        self._target = target
        self.allow_gaps = allow_gaps
        self.first_batch_id = first_batch_id
        self.position = position
        self.batch_id = batch_id
        self.stores = stores
        self._writers: dict[str, _StoreWriter] = {}
        self._done = False
        self._open_here: set[int] = set()
        self.applied: frozenset[StorePartition] = frozenset()
        self.skipped: frozenset[StorePartition] = frozenset()

    def _writer(self, store: str) -> _StoreWriter:
        if self._done:
            raise RuntimeError("this batch has already ended; begin a new one")
        writer = self._writers.get(store)
        if writer is None:
            declared = self._target.stores
            spec = declared.get(store)
            if spec is None:
                raise UnknownStateStoreError(
                    f"batch writes to store {store!r}, which the application does not declare; "
                    f"declared stores: {', '.join(sorted(declared)) or 'none'}"
                )
            writer = self._writers[store] = _StoreWriter(spec)
        return writer

    def put(
        self,
        store: str,
        key: Any,
        value: Any,
        window_start: Time | None = None,
        *,
        timestamp: Time | None = None,
        session: tuple[Time, Time] | None = None,
    ) -> None:
        """Set `key` to `value`; a `None` value deletes. What else a put names depends on
        the store's type: `window_start=ms` for a window store, `timestamp=ms` for a
        timestamped or versioned store (on a versioned store a `None` value is a tombstone
        version at that time), `session=(start_ms, end_ms)` for a session store. A time may
        be a timezone-aware `datetime` instead of ms since the epoch.
        """
        writer = self._writer(store)
        spec = writer.spec
        key_bytes = writer.key_bytes(key)
        value_bytes = writer.value_bytes(value)
        partition = spec.partition_of(key, key_bytes)
        extras = (
            NO_EXTRAS
            if window_start is None and timestamp is None and session is None
            else PutExtras(window_start, timestamp, session)
        )
        entry = spec.entry(key_bytes, value_bytes, extras)
        entries = writer.entries.get(partition)
        if entries is None:
            entries = writer.entries[partition] = []
        entries.append(entry)

    def put_all(self, store: str, entries: Iterable[tuple[Any, ...]] | Mapping[Any, Any]) -> None:
        """`put` for many `(key, value)` pairs of a key-value store (`None` deletes), or
        the items of a mapping; for timestamped, versioned and session stores, `(key,
        value, time)` entries, the time being what `put` names for the type: `timestamp`,
        or `session` (`(start, end)`). Window stores have `put_all_windows`.

        The key-value path is the bulk path the pipeline sinks use: one look-up of the
        store, keys and values encoded in one call each (`Serde.serialize_many`), then a
        tight loop. If any of them fails to encode, the pairs are put one by one, which
        adds those before it and raises the error naming it, exactly as `put` would.
        """
        writer = self._writer(store)
        spec = writer.spec
        if not spec.bulk_pairs:
            self._put_timed(store, spec, entries)
            return
        if isinstance(entries, Mapping):
            pairs = list(entries.items())
        else:
            pairs = entries if isinstance(entries, list) else list(entries)
        if not pairs:
            return
        try:
            keys = [key for key, _ in pairs]
            values = [value for _, value in pairs]
        except (TypeError, ValueError):
            raise TypeError(
                f"store {store!r}: put_all takes (key, value) pairs or a mapping, got an entry "
                f"{_not_a_pair(pairs)!r}"
            ) from None
        try:
            raw_keys = spec.key_serde.serialize_many(keys)
            raw_values = _encoded_values(spec.value_serde, values)
            if not len(raw_keys) == len(raw_values) == len(pairs):
                raise ValueError("a serde's serialize_many returned a list of another length")
            sizes = spec.key_sizes
            if sizes is not None and not (
                sizes[0] <= min(map(len, raw_keys)) and max(map(len, raw_keys)) <= sizes[1]
            ):
                raise ValueError("a key the engine cannot keep: put one by one, which names it")
        except Exception:
            self._put_each(writer, pairs)
            return
        by_partition = writer.entries
        if spec.partitions == 1:
            by_partition.setdefault(0, []).extend(zip(raw_keys, raw_values, strict=True))
            return
        partition_of = spec.partition_of
        for key, raw_key, raw_value in zip(keys, raw_keys, raw_values, strict=True):
            partition = partition_of(key, raw_key)
            bucket = by_partition.get(partition)
            if bucket is None:
                bucket = by_partition[partition] = []
            bucket.append((raw_key, raw_value))

    def _put_timed(
        self, store: str, spec: StoreSpec, entries: Iterable[tuple[Any, ...]] | Mapping[Any, Any]
    ) -> None:
        """`put_all`'s `(key, value, time)` entries of a store whose puts name a time, each
        checked for its shape before any is put."""
        time_named = _TIME_NAMED.get(spec.store_type)
        if time_named is None or isinstance(entries, Mapping):
            instead = _INSTEAD.get(spec.store_type, "put with what its type needs")
            raise TypeError(
                f"store {store!r} is a {spec.store_type} store: put_all takes the pairs of a "
                f"key-value store, or (key, value, time) entries; use {instead}"
            )
        listed = list(entries)
        wrong = next((entry for entry in listed if not _is_triple(entry)), _NONE_WRONG)
        if wrong is not _NONE_WRONG:
            raise TypeError(
                f"store {store!r} is a {spec.store_type} store: put_all takes (key, value, "
                f"{time_named}) entries, got {wrong!r}; nothing of this call was put"
            )
        for key, value, time in listed:
            self.put(store, key, value, **{time_named: time})

    @staticmethod
    def _put_each(writer: _StoreWriter, pairs: list[tuple[Any, Any]]) -> None:
        key_bytes, value_bytes, partition_of = (
            writer.key_bytes,
            writer.value_bytes,
            writer.spec.partition_of,
        )
        by_partition = writer.entries
        for key, value in pairs:
            raw_key = key_bytes(key)
            raw_value = value_bytes(value)
            partition = partition_of(key, raw_key)
            bucket = by_partition.get(partition)
            if bucket is None:
                bucket = by_partition[partition] = []
            bucket.append((raw_key, raw_value))

    def put_all_windows(self, store: str, entries: Iterable[tuple[Any, int, Any]]) -> None:
        """`put` for many `(key, window_start, value)` entries of a window store."""
        for key, window_start, value in entries:
            self.put(store, key, value, window_start)

    def delete(
        self,
        store: str,
        key: Any,
        window_start: Time | None = None,
        *,
        timestamp: Time | None = None,
        session: tuple[Time, Time] | None = None,
    ) -> None:
        """Delete `key`: its window at `window_start` (window stores), a tombstone version at
        `timestamp` (versioned stores), its `session` (session stores)."""
        self.put(store, key, None, window_start, timestamp=timestamp, session=session)

    def pending(self) -> Mapping[StorePartition, list[Any]]:
        """The serialized writes by store partition, in the order they were added."""
        return {
            (store, partition): entries
            for store, writer in self._writers.items()
            for partition, entries in writer.entries.items()
        }

    def __enter__(self) -> Batch:
        open_here: set[int] = _open_batches.__dict__.setdefault("targets", set())
        if id(self._target) in open_here:
            raise RuntimeError(
                "a batch of this application is already open in this thread: end it before "
                "beginning another (a nested batch would commit first, and fence out the "
                "batch around it)"
            )
        open_here.add(id(self._target))
        self._open_here = open_here
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done = True
        self._open_here.discard(id(self._target))
        try:
            if exc_type is None:
                self.applied, self.skipped = self._target.commit_batch(self)
        finally:
            self._writers.clear()  # an exception inside the block discards the batch


def _encoded_values(serde: Serde[Any], values: list[Any]) -> Sequence[bytes | None]:
    """`values` encoded in one call, `None` (a delete) left as it is."""
    if None not in values:
        return serde.serialize_many(values)
    encoded = iter(serde.serialize_many([value for value in values if value is not None]))
    return [None if value is None else next(encoded) for value in values]


_TIME_NAMED = {
    "timestamped_key_value": "timestamp",
    "versioned_key_value": "timestamp",
    "session": "session",
}
"""What a put of each store type whose puts name a time calls it (`put_all`'s third)."""

_INSTEAD = {"window": "put_all_windows with (key, window_start, value) entries"}
"""The bulk write of a store type `put_all` does not take."""

_NONE_WRONG = object()


def _is_triple(entry: Any) -> bool:
    try:
        _, _, _ = entry
    except (TypeError, ValueError):
        return False
    return True


def _not_a_pair(entries: list[Any]) -> Any:
    """The first of `entries` that does not unpack as `(key, value)`."""
    for entry in entries:
        try:
            _, _ = entry
        except (TypeError, ValueError):
            return entry
    return None
