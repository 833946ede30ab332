"""Merged pages of range-type queries across partitions (SPEC 8.2).

A page is at most `limit` rows of every requested partition, merged in the query's key
order (the order of the serialized keys, as within a partition), and `next`: a cursor
for the following page, or `None` after the last row. A cursor holds the last key
returned and the merged position of the pages so far; the next page reads every
partition from just after that key, at a bound of at least that position, so paging never
goes back in time and no key comes twice, whichever instance answers.

Each partition is read lazily: this instance's partitions a chunk at a time (a range type
with a limited form, `LIMITED`) or from one answer cut to the page (any other), the others
in chunks from the instances hosting them (forwarded merged pages of their partitions, each
about its share of `limit` rows), so an instance holds about one page of rows per request,
whatever the store's size.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from types import TracebackType
from typing import Any

from iqstate import (
    Position,
    Query,
    QueryResult,
    RangeQuery,
    ResultOrder,
    TimestampedRangeQuery,
    VersionedRangeQuery,
)
from iqstate.plugins import QueryCodec
from iqstate.queries import (
    LimitedRangeQuery,
    LimitedTimestampedRangeQuery,
    LimitedVersionedRangeQuery,
)
from iqstate.store_exceptions import log_store_exception
from iqstate_http import jsonin
from iqstate_http.codecs import (
    BadRequest,
    position_from_json,
    position_to_json,
    resume_range,
    to_json,
)
from iqstate_http.limits import MAX_LIMIT

DEFAULT_LIMIT = 1000

Row = tuple[bytes, Any]
"""A row of a page: its key's bytes (the merge order) and its JSON form."""


class PartitionsFailed(Exception):
    """Partitions of a merged page that could not answer: `{partition: (reason, message)}`."""

    def __init__(self, failures: dict[int, tuple[str, str]]) -> None:
        named = "; ".join(f"partition {p}: {r}: {m}" for p, (r, m) in sorted(failures.items()))
        super().__init__(f"the page needs every partition, and these could not answer: {named}")
        self.failures = failures


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last key returned (serialized) and the position read so far."""

    after: bytes
    position: Position


def fingerprint(store: str, query_json: Any) -> str:
    """What a cursor is for: the store and the query as the caller sent it."""
    text = json.dumps([store, query_json], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_cursor(cursor: Cursor, query_fingerprint: str) -> str:
    document = {
        "v": 1,
        "f": query_fingerprint,
        "k": base64.b64encode(cursor.after).decode("ascii"),
        "p": position_to_json(cursor.position),
    }
    text = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode("ascii").rstrip("=")


def decode_cursor(text: Any, query_fingerprint: str) -> Cursor:
    """A cursor a page returned as `next`; `BadRequest` for anything else."""
    if not isinstance(text, str) or len(text) > 64 * 1024:
        raise BadRequest("'cursor' must be the 'next' string of a previous page")
    try:
        document = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        after = base64.b64decode(document["k"], validate=True)
        position = position_from_json(document["p"] or {})
        version, owner = document["v"], document["f"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise BadRequest(
            "malformed 'cursor': send the 'next' of a previous page as it is"
        ) from None
    if version != 1 or owner != query_fingerprint:
        raise BadRequest(
            "the 'cursor' belongs to another query: send it with the store and query of the "
            "page that returned it"
        )
    return Cursor(after, position)


def page_limit(value: Any) -> int:
    """A page's `limit`: an integer as JSON Schema sees one (`2.0` too), 1 to MAX_LIMIT."""
    if value is None:
        return DEFAULT_LIMIT
    if (number := jsonin.integer(value)) is None or not 1 <= number <= MAX_LIMIT:
        raise BadRequest(f"'limit' must be an integer from 1 to {MAX_LIMIT}")
    return number


@dataclass(frozen=True)
class Chunked:
    """How a range type is read a chunk at a time: the query of its first `n` rows, and
    the same range from a key on (inclusive), in its order."""

    first: Callable[[Any, int], Query[Any]]
    resume: Callable[[Any, Any], Query[Any]]


def _resumed_range(query: RangeQuery[Any, Any], key: Any) -> Query[Any]:
    return resume_range(query, key)[0]


def _resumed_versioned_range(query: VersionedRangeQuery[Any, Any], key: Any) -> Query[Any]:
    return VersionedRangeQuery(key, query.upper_bound, query.as_of_timestamp)


LIMITED: dict[type[Query[Any]], Chunked] = {
    RangeQuery: Chunked(LimitedRangeQuery.of, _resumed_range),
    TimestampedRangeQuery: Chunked(LimitedTimestampedRangeQuery.of, _resumed_range),
    VersionedRangeQuery: Chunked(LimitedVersionedRangeQuery.of, _resumed_versioned_range),
}
"""The range types read a chunk at a time, each with the query of its first `n` rows."""


def chunked(query: Query[Any]) -> Query[Any] | None:
    """`query` when it is read a chunk at a time (see `LIMITED`); None otherwise."""
    return query if type(query) in LIMITED else None


def limited(query: Query[Any], rows: int) -> Query[Any]:
    """The query of the first `rows` rows of a range `chunked` names."""
    return LIMITED[type(query)].first(query, rows)


def resumed(query: Query[Any], key: Any) -> Query[Any]:
    """The range `chunked` names, from `key` on (inclusive)."""
    return LIMITED[type(query)].resume(query, key)


class _OneRow:
    """One `(key, value)` row as the closeable iterator a codec's `encode` reads."""

    def __init__(self, key: Any, value: Any) -> None:
        self._row = (key, value)

    def __enter__(self) -> _OneRow:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        yield self._row

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class Pager:
    """How one query type is paged: its order, how to resume it, how a row is encoded."""

    codec: QueryCodec

    @staticmethod
    def descending(query: Query[Any]) -> bool:
        return getattr(query, "result_order", None) is ResultOrder.DESCENDING

    def resumed(
        self, query: Query[Any], key: Any, serialize_key: Callable[[Any], bytes]
    ) -> tuple[Query[Any], Callable[[bytes], bool] | None]:
        assert self.codec.resume is not None
        resumed: tuple[Query[Any], Callable[[bytes], bool] | None] = self.codec.resume(
            query, key, serialize_key
        )
        return resumed

    def row(self, key: Any, value: Any) -> Any:
        """The JSON form of one row, as the codec writes rows (its first item the key)."""
        if self.codec.plugin == "iqstate-http" and self.codec.name == "range":
            return [to_json(key), to_json(value)]
        return self.codec.encode(_OneRow(key, value), to_json)[0]


def pager_for(codec: QueryCodec | None) -> Pager:
    if codec is None or codec.resume is None:
        raise BadRequest(
            '"merge": true pages range-type queries (those ordered by key: range, '
            "timestamped_range, versioned_range, prefix_scan); this query's answer is not "
            "ordered by key"
        )
    return Pager(codec)


def close_result(result: QueryResult[Any]) -> None:
    """Close a successful result's iterator (a range's), if it holds one."""
    if result.is_success:
        closing = getattr(result.result, "close", None)
        if closing is not None:
            closing()


class LocalRows:
    """One local partition's rows after a key, in order, read a chunk at a time: a range
    `chunked` names (`ranged`) is read as `limited` queries of `chunk` pairs, each from
    where the last ended, so a page reads about its share of the partition, not all of it.
    A read that fails is this partition's failure (`PartitionsFailed`)."""

    def __init__(
        self,
        where: tuple[str, int],
        first: QueryResult[Any],
        read: Callable[[Query[Any]], QueryResult[Any]],
        ranged: Query[Any] | None,
        chunk: int,
        serialize_key: Callable[[Any], bytes],
        pager: Pager,
        within: Callable[[bytes], bool] | None,
        after: bytes | None,
    ) -> None:
        (self._store, self._partition), self._first, self._read = where, first, read
        self._ranged, self._chunk = ranged, chunk
        self._serialize_key, self._pager, self._within, self._after = (
            serialize_key, pager, within, after,
        )  # fmt: skip
        self.position = first.position or Position.empty()
        self._current = first
        """The result being read: `close` closes it, whether its rows were read or not."""

    def close(self) -> None:
        """Close the result being read (its iterator), read or not: closing `iter(self)`
        closes nothing when it never started."""
        close_result(self._current)

    def _failed(self, reason: str, message: str) -> PartitionsFailed:
        return PartitionsFailed({self._partition: (reason, message)})

    def __iter__(self) -> Iterator[Row]:
        result, ranged, after = self._first, self._ranged, self._after
        descending = ranged is not None and bool(getattr(ranged, "is_descending", False))
        serialize_key, within, row = self._serialize_key, self._within, self._pager.row
        while True:
            read, last = 0, None
            try:
                with result.result as pairs:
                    for key, value in pairs:
                        read, last = read + 1, key
                        key_bytes = serialize_key(key)
                        if within is not None and not within(key_bytes):
                            return
                        if after is not None and (
                            key_bytes >= after if descending else key_bytes <= after
                        ):
                            continue
                        yield key_bytes, row(key, value)
            except Exception as exc:  # a record its serde cannot read: this partition's
                log_store_exception(
                    f"store {self._store!r} partition {self._partition} reading its rows", exc
                )
                raise self._failed("STORE_EXCEPTION", f"{type(exc).__name__}: {exc}") from exc
            if ranged is None or read < self._chunk:
                return  # the whole range was read, or it ended within the chunk
            ranged = resumed(ranged, last)
            after = serialize_key(last)
            result = self._current = self._read(limited(ranged, self._chunk))
            if result.is_failure:
                raise self._failed(result.failure_reason.name, result.failure_message)
            self.position = self.position.merge(result.position)


ChunkFetch = Callable[[str | None], dict[str, Any]]
"""Fetches a remote instance's next chunk from a cursor (`None`: the request's own); the
chunk is a merged page's JSON (`rows`, `next`, `position`), or raises `PartitionsFailed`."""


class RemoteRows:
    """One remote instance's partitions, merged by that instance, read chunk by chunk."""

    def __init__(
        self,
        first: dict[str, Any],
        fetch: ChunkFetch,
        key_bytes: Callable[[Any], bytes],
    ) -> None:
        self._chunk = first
        self._fetch = fetch
        self._key_bytes = key_bytes
        self.position = position_from_json(first.get("position") or {})

    def __iter__(self) -> Iterator[Row]:
        chunk = self._chunk
        while True:
            for row in chunk["rows"]:
                yield self._key_bytes(row[0]), row
            cursor = chunk.get("next")
            if cursor is None:
                return
            chunk = self._fetch(cursor)
            self.position = self.position.merge(position_from_json(chunk.get("position") or {}))


def chunk_size(limit: int, share: int, of: int) -> int:
    """Rows to ask of an instance holding `share` of the page's `of` partitions: its share
    of `limit`, and some slack for uneven keys, never more than `limit`."""
    return min(limit, math.ceil(limit * share / of) + 16)


def merge_page(
    sources: list[Iterator[Row]], limit: int, descending: bool
) -> tuple[list[Any], bytes | None, bool]:
    """The first `limit` rows of the merged sources: their JSON forms, the last row's key,
    and whether rows remain after them."""
    merged = heapq.merge(*sources, key=itemgetter(0), reverse=descending)
    rows: list[Any] = []
    last: bytes | None = None
    for key_bytes, row in merged:
        if len(rows) == limit:
            return rows, last, True
        rows.append(row)
        last = key_bytes
    return rows, last, False
