"""What the key route reads in each type of store, and how its answer is written.

`GET /v1/stores/{store}/keys/{key}` reads a key-value or global store with `KeyQuery`
(`"value"`), a timestamped store with `TimestampedKeyQuery` and a versioned store with
`VersionedKeyQuery`, its current version, or with `?as_of=T` the version valid at T:
`"value"` with the `"timestamp"` it was put with (both `null` for an absent key, or a
versioned key whose version then is a delete); a versioned answer has `"valid_to"` too.
Window and session stores have no key route: a key's windows are asked with a query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iqstate import KeyQuery, Query, TimestampedKeyQuery, VersionedKeyQuery
from iqstate_http.codecs import json_bytes, to_json


@dataclass(frozen=True)
class KeyRead:
    """How the key route reads one type of store."""

    query: Callable[[Any], Query[Any]]
    """The query of a key."""
    members: Callable[[Any], bytes]
    """The answer's leading JSON members (`"value":...`, no braces) from the query's result."""
    stamped: bool
    """Whether the answer carries a `"timestamp"`."""
    at: Callable[[Any, int], Query[Any]] | None = None
    """The query of a key as of an instant (ms), on a store that keeps versions."""


def _value(result: Any) -> bytes:
    return b'"value":' + json_bytes(to_json(result))


def _stamped(result: Any) -> bytes:
    """A `ValueAndTimestamp` (or None) as its value and timestamp."""
    if result is None:
        return b'"value":null,"timestamp":null'
    return b'"value":%b,"timestamp":%d' % (json_bytes(to_json(result.value)), result.timestamp)


def _version(result: Any) -> bytes:
    """A `VersionedRecord` (or None) as its value, timestamp and end (`null`: current)."""
    if result is None:
        return b'"value":null,"timestamp":null,"valid_to":null'
    valid_to = b"null" if result.valid_to is None else b"%d" % result.valid_to
    return b'%b,"valid_to":%b' % (_stamped(result), valid_to)


KEY_READS: dict[str, KeyRead] = {
    "key_value": KeyRead(KeyQuery.with_key, _value, False),
    "global_key_value": KeyRead(KeyQuery.with_key, _value, False),
    "timestamped_key_value": KeyRead(TimestampedKeyQuery.with_key, _stamped, True),
    "versioned_key_value": KeyRead(VersionedKeyQuery.with_key, _version, True, VersionedKeyQuery),
}
"""The store types the key route answers, by `store_type`."""

ASKED_INSTEAD = {
    "window": "a 'window_key' query",
    "session": "a 'window_range' query with a 'key'",
}
"""How the keys of the store types without a key route are looked up (`POST /v1/query`)."""

ANSWER = b'{%b,"partition":%d,"position":%b,"host":%b,"role":%b,"lag":%b}'
"""The key route's answer: the members of `KeyRead.members`, then where it came from."""
