"""What the key route reads in each type of store, and how its answer is written.

`GET /v1/stores/{store}/keys/{key}` reads a key-value or global store with `KeyQuery`
(`"value"`), a timestamped store with `TimestampedKeyQuery` and a versioned store with
`VersionedKeyQuery`, its current version: `"value"` with the `"timestamp"` it was put with
(both `null` for an absent key, or a versioned key whose current version is a delete).
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


def _value(result: Any) -> bytes:
    return b'"value":' + json_bytes(to_json(result))


def _stamped(result: Any) -> bytes:
    """A `ValueAndTimestamp` or `VersionedRecord` (or None) as its value and timestamp."""
    if result is None:
        return b'"value":null,"timestamp":null'
    return b'"value":%b,"timestamp":%d' % (json_bytes(to_json(result.value)), result.timestamp)


KEY_READS: dict[str, KeyRead] = {
    "key_value": KeyRead(KeyQuery.with_key, _value, False),
    "global_key_value": KeyRead(KeyQuery.with_key, _value, False),
    "timestamped_key_value": KeyRead(TimestampedKeyQuery.with_key, _stamped, True),
    "versioned_key_value": KeyRead(VersionedKeyQuery.with_key, _stamped, True),
}
"""The store types the key route answers, by `store_type`."""

ASKED_INSTEAD = {
    "window": "a 'window_key' query",
    "session": "a 'window_range' query with a 'key'",
}
"""How the keys of the store types without a key route are looked up (`POST /v1/query`)."""

ANSWER = b'{%b,"partition":%d,"position":%b,"host":%b,"role":%b,"lag":%b}'
"""The key route's answer: the members of `KeyRead.members`, then where it came from."""
