"""Closeable iterators over store contents, as returned by range and window queries."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")

_NOTHING = object()


_READ_CLOSED = (
    "cannot read from a closed KeyValueIterator: an iterator is read once, and closes "
    "itself when read to its end (copy the pairs into a list to read them again)"
)


class KeyValueIterator(Generic[K, V]):
    """An iterator of `(key, value)` pairs that holds store resources until closed.

    Use it as a context manager, or call `close()`; iterating past the end closes it
    too. Reading from a closed iterator raises `ValueError`.

    An iterator over pairs already in memory (`of_rows`, as the engines' snapshots are)
    is read by `for` loops and `list()` without a Python call per pair: `iter()` returns a
    C-level chain over the same remaining pairs, so `next()` and loops stay in step, and
    `close()` empties the pairs, so a loop reading on after it raises `ValueError` too.
    """

    __slots__ = ("_closed", "_convert", "_on_close", "_peeked", "_rows", "_source")

    def __init__(
        self,
        source: Iterable[tuple[K, V]],
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._source: Iterator[tuple[K, V]] = iter(source)
        self._rows: list[tuple[K, V]] | None = None
        self._convert: tuple[Callable[[list[Any]], list[Any]], Callable[[Any], Any]] | None = None
        self._on_close = on_close
        self._peeked: object = _NOTHING
        self._closed = False

    @classmethod
    def of_rows(
        cls, rows: list[tuple[K, V]], on_close: Callable[[], None] | None = None
    ) -> KeyValueIterator[K, V]:
        """An iterator over `rows`, which it takes over: closing it empties the list."""
        iterator = cls(rows, on_close)
        iterator._rows = rows
        return iterator

    @classmethod
    def empty(cls) -> KeyValueIterator[K, V]:
        return cls(())

    def __iter__(self) -> Iterator[tuple[K, V]]:
        if self._convert is not None:
            self._apply_conversion()
        if self._rows is None or self._closed or self._peeked is not _NOTHING:
            return self
        return itertools.chain(self._source, _EndOf(self))

    def __next__(self) -> tuple[K, V]:
        if self._closed:
            raise ValueError(_READ_CLOSED)
        if self._convert is not None:
            self._apply_conversion()
        peeked = self._peeked
        if peeked is not _NOTHING:
            self._peeked = _NOTHING
            return peeked  # type: ignore[return-value]
        try:
            return next(self._source)
        except StopIteration:
            self.close()
            raise

    def has_next(self) -> bool:
        """True iff another pair is available (reads one ahead)."""
        if self._closed:
            return False
        if self._convert is not None:
            self._apply_conversion()
        if self._peeked is _NOTHING:
            try:
                self._peeked = next(self._source)
            except StopIteration:
                self.close()
                return False
        return True

    def peek_next_key(self) -> K:
        """The key of the next pair, without consuming it; `StopIteration` at the end."""
        if not self.has_next():
            raise StopIteration("no more entries")
        return self._peeked[0]  # type: ignore[index, no-any-return]

    def map(self, fn: Callable[[tuple[K, V]], tuple[K2, V2]]) -> KeyValueIterator[K2, V2]:
        """A lazily transformed iterator that takes over this one's pairs and its closing."""
        if self._closed:
            raise ValueError("cannot map a closed KeyValueIterator")
        if self._convert is not None:
            self._apply_conversion()
        source: Iterator[tuple[K, V]] = self._source
        if self._peeked is not _NOTHING:
            source = itertools.chain([self._peeked], source)  # type: ignore[list-item]
            self._peeked = _NOTHING
        return KeyValueIterator(map(fn, source), self.close)

    def map_rows(
        self,
        convert: Callable[[list[tuple[K, V]]], list[tuple[K2, V2]]],
        fn: Callable[[tuple[K, V]], tuple[K2, V2]],
    ) -> KeyValueIterator[K2, V2]:
        """Like `map(fn)`, but pairs already in memory are converted by `convert` in one
        call (bulk decoding), when the new iterator is first read: like `map`, it does no
        work before (a query holding a lock returns at once). When `convert` raises, the
        pairs are mapped lazily with `fn`, so the failure surfaces at the pair it
        concerns, as with `map`."""
        if self._rows is None or self._closed or self._peeked is not _NOTHING:
            return self.map(fn)
        if self._convert is not None:
            self._apply_conversion()
        mapped: KeyValueIterator[Any, Any] = KeyValueIterator.of_rows(
            list(self._source), self.close
        )
        mapped._convert = (convert, fn)
        return mapped

    def _apply_conversion(self) -> None:
        """Convert the pairs as `map_rows` asked, on the first read."""
        assert self._convert is not None and self._rows is not None
        (convert, fn), self._convert = self._convert, None
        rows = self._rows
        try:
            converted = convert(rows)
        except Exception:
            self._rows = None  # read pair by pair, through __next__
            self._source = map(fn, rows)
            return
        self._rows = converted
        self._source = iter(converted)

    def close(self) -> None:
        """Release what the iterator holds; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._peeked = _NOTHING
        if self._rows is not None:
            self._rows.clear()  # a loop still reading through `iter()` meets `_EndOf`
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> KeyValueIterator[K, V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _EndOf:
    """The end of a `KeyValueIterator`'s C-level chain. `itertools.chain` asks for its
    iterator only when the pairs have run out: then it closes the `KeyValueIterator` and
    gives an empty iterator (the loop ends without a `StopIteration` raised from Python),
    or, when the iterator was closed meanwhile, a reader that raises as reading a closed
    one does, at every read (the chain keeps an iterator that raised)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: KeyValueIterator[Any, Any]) -> None:
        self._owner = owner

    def __iter__(self) -> Iterator[Any]:
        if self._owner.closed:
            return _ReadingClosed()
        self._owner.close()
        return iter(())


class _ReadingClosed:
    """Reading on from a closed `KeyValueIterator`'s chain."""

    __slots__ = ()

    def __iter__(self) -> _ReadingClosed:
        return self

    def __next__(self) -> Any:
        raise ValueError(_READ_CLOSED)


T = TypeVar("T")


class VersionedRecordIterator(Generic[T]):
    """The versions a `MultiVersionedKeyQuery` found, in the order it asked for: an
    iterator, usable as a context manager; reading after `close()` raises `ValueError`."""

    __slots__ = ("_closed", "_records")

    def __init__(self, records: Iterable[T]) -> None:
        self._records: Iterator[T] = iter(records)
        self._closed = False

    def __iter__(self) -> VersionedRecordIterator[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise ValueError("cannot read from a closed VersionedRecordIterator")
        return next(self._records)

    def map(self, fn: Callable[[T], V]) -> VersionedRecordIterator[V]:
        """A lazily transformed iterator over the records not yet read."""
        return VersionedRecordIterator(map(fn, self._records))

    def close(self) -> None:
        self._closed = True
        self._records = iter(())

    def __enter__(self) -> VersionedRecordIterator[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
