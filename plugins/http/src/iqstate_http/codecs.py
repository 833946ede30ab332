"""JSON forms of queries, keys, values and results.

Keys and values cross as JSON through the store's serdes: a `string` key is a JSON string,
`int64` an integer, `float64` a number, `bytes` a base64 string, `json` any JSON value.
Built-in queries (`"type"` names): `key`, `range`, `window_key`, `window_range`,
`timestamped_key`, `timestamped_range`, `versioned_key`, `multi_versioned_key` and
`versioned_range`, each for the types of store `STORE_QUERY_TYPES` names; plugins add more
through `iqstate_register_query_codecs`. A `ValueAndTimestamp` is written
`{"value", "timestamp"}`, a `VersionedRecord` `{"value", "timestamp", "valid_to"}`.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from iqstate import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    Query,
    QueryResult,
    RangeQuery,
    ResultOrder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.plugins import PluginRegistry, QueryCodec
from iqstate.runtime.spec import StoreSpec
from iqstate_http import jsonin
from iqstate_http.client_numbers import INT32_MAX, INT64_MAX, decimal_integer, whole_number

D = TypeVar("D")


class BadRequest(ValueError):
    """A request the service refuses with 400; the message says what is wrong."""


def whole_number_parameter(
    text: str, name: str, minimum: int = 0, maximum: int = INT64_MAX, hint: str = ""
) -> int:
    """A URL parameter's `text` as a whole number from `minimum` to `maximum`;
    `BadRequest` naming the parameter, its range and `hint` (what to do instead) otherwise."""
    number = whole_number(text, maximum)
    if number is None or number < minimum:
        advice = f" ({hint})" if hint else ""
        raise BadRequest(
            f"{name!r} must be a whole number from {minimum} to {maximum}, got "
            f"{text[:40]!r}{advice}"
        )
    return number


_TYPE_NAMES = {
    "string": "str",
    "int64": "int",
    "float64": "number",
    "bytes": "base64 str",
    "json": "JSON",
}


def expected_type(serde: Any) -> str:
    name = getattr(serde, "name", type(serde).__name__)
    return f"{_TYPE_NAMES.get(name, name)} (serde {name})"


INT64_MIN = -(2**63)
_INT64_TEXT = len(str(INT64_MIN))
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""Padded standard base64: the form `bytes` keys take in JSON and in URLs."""
INTEGER = r"^-?[0-9]+$"
NUMBER = r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$"
"""A JSON number: the form `float64` keys take in URLs."""
_BASE64, _INTEGER, _NUMBER = re.compile(BASE64), re.compile(INTEGER), re.compile(NUMBER)


def key_from_json(spec: StoreSpec, value: Any) -> Any:
    """A JSON key as the store's key serde expects it; `BadRequest` naming the type."""
    serde = spec.key_serde
    name = getattr(serde, "name", None)
    if value is None:
        raise BadRequest(f"store {spec.name!r}: a key must not be null")
    if (
        name == "int64"
        and isinstance(value, float)
        and (whole := jsonin.integer(value)) is not None
    ):
        value = whole  # 2.0 is the integer 2 in JSON
    if name == "bytes":
        if not isinstance(value, str) or not _BASE64.fullmatch(value):
            raise BadRequest(
                f"store {spec.name!r} expects keys of type {expected_type(serde)} "
                f"(padded standard base64), got {json.dumps(value)[:60]}"
            )
        value = base64.b64decode(value)
    try:
        serde.serialize(value)
    except Exception as exc:
        outside = name == "int64" and type(value) is int  # the right type, too large
        raise BadRequest(
            f"store {spec.name!r} expects keys of type {expected_type(serde)}, "
            f"got {json.dumps(value)[:60]}"
            + (", outside the signed 64-bit range" if outside else "")
        ) from exc
    return value


def key_from_path(spec: StoreSpec, text: str) -> Any:
    """A key given in a URL path, parsed for the store's key serde: `int64` and `float64`
    keys are decimal JSON numbers, `json` keys JSON text, any other key the text itself."""
    name = getattr(spec.key_serde, "name", None)
    try:
        if name == "int64":
            if len(text) <= _INT64_TEXT and _INTEGER.fullmatch(text):  # the usual key, quickly
                return key_from_json(spec, int(text))
            if not (_INTEGER.fullmatch(text) or _NUMBER.fullmatch(text)):
                raise ValueError("not an integer")
            return key_from_json(spec, decimal_integer(text))
        if name == "float64":
            if not _NUMBER.fullmatch(text):
                raise ValueError("not a number")
            return key_from_json(spec, jsonin.loads(text))
        if name == "json":
            return key_from_json(spec, jsonin.loads(text))
    except BadRequest:
        raise  # `key_from_json` said what is wrong
    except ValueError as exc:
        expected = expected_type(spec.key_serde)
        raise BadRequest(
            f"store {spec.name!r} expects keys of type {expected}, got {text[:60]!r}: {exc}"
        ) from exc
    return key_from_json(spec, text)


def failure_reason_of(code: str) -> FailureReason:
    """The failure an error code names (the API writes a partition's failure as its reason
    in lower case: `not_active`); any other error (an instance stopping, busy, a refused
    token) is `NOT_PRESENT`: another replica may answer."""
    try:
        return FailureReason[code.upper()]
    except KeyError:
        return FailureReason.NOT_PRESENT


def path_segment(text: str) -> str:
    """`text` as one segment of a URL path: percent-encoded, `/` included, and the dot
    segments `.` and `..` (which clients resolve away) as `%2E`."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def to_json(value: Any) -> Any:
    """A key or value as JSON (bytes as base64)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


_encode_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
"""Encode as Starlette's `JSONResponse` does, in one bound call."""


def json_bytes(value: Any) -> bytes:
    """`value` as a UTF-8 JSON document, byte for byte what `JSONResponse` would send."""
    return _encode_json(value).encode()


@functools.lru_cache(maxsize=256)
def position_json_bytes(position: Position | None) -> bytes:
    """`position_to_json(position)` encoded; cached like it, for responses built as bytes."""
    return json_bytes(position_to_json(position))


@functools.lru_cache(maxsize=256)
def position_to_json(position: Position | None) -> dict[str, dict[str, int]] | None:
    """A position as JSON; cached, as a partition's position changes only once per batch
    (the dict is shared: serialize it, never modify it)."""
    if position is None:
        return None
    return {
        topic: {str(p): o for p, o in offsets.items()}
        for topic, offsets in position.to_map().items()
    }


def position_from_json(body: Any) -> Position:
    """A position `{topic: {partition: offset}}`: partitions are decimal strings, offsets
    integers; anything else is a `BadRequest`."""
    if not isinstance(body, dict) or not all(isinstance(parts, dict) for parts in body.values()):
        raise BadRequest("a position is an object {topic: {partition: offset}}")
    offsets: dict[str, dict[int, int]] = {}
    for topic, parts in body.items():
        for partition, offset in parts.items():
            if (number := whole_number(partition, INT32_MAX)) is None:
                raise BadRequest(
                    f"malformed position: partition {partition[:40]!r} of {topic!r} (a "
                    f"partition is a whole number up to {INT32_MAX})"
                )
            offset_number = jsonin.integer(offset)
            if offset_number is None or not 0 <= offset_number <= INT64_MAX:
                raise BadRequest(
                    f"malformed position: offset {json.dumps(offset)[:40]} of {topic!r} "
                    f"partition {number} (an offset is a whole number from 0 to {INT64_MAX})"
                )
            of_topic = offsets.setdefault(topic, {})
            if number in of_topic:  # "0" and "00": a reader could take either offset
                raise BadRequest(
                    f"malformed position: partition {number} of {topic!r} is given twice"
                )
            of_topic[number] = offset_number
    try:
        return Position.from_map(offsets)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"malformed position: {exc}") from exc


def _int(body: Mapping[str, Any], field: str) -> int:
    if body.get(field) is None:
        raise BadRequest(f"query field {field!r} is required: a 64-bit integer (milliseconds)")
    value = jsonin.integer(body[field])
    if value is None or not INT64_MIN <= value <= INT64_MAX:
        raise BadRequest(f"query field {field!r} must be a 64-bit integer (milliseconds)")
    return value


def _int_or(body: Mapping[str, Any], field: str, default: D) -> int | D:
    """An optional time field: `default` when absent or null, else as `_int` reads it."""
    return default if body.get(field) is None else _int(body, field)


def _flag_field(body: Mapping[str, Any], field: str, query: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise BadRequest(f"a {query} query's {field!r} must be true or false")
    return value


KeyFromJson = Callable[[Any], Any]
ToJson = Callable[[Any], Any]


def _required_key(body: Mapping[str, Any], key: KeyFromJson, query: str) -> Any:
    if body.get("key") is None:
        raise BadRequest(f"a {query} query needs a non-null 'key'")
    return key(body["key"])


def _bounds(body: Mapping[str, Any], key: KeyFromJson) -> tuple[Any, Any]:
    lower = None if body.get("lower") is None else key(body["lower"])
    upper = None if body.get("upper") is None else key(body["upper"])
    return lower, upper


def _order(body: Mapping[str, Any]) -> ResultOrder:
    try:
        return ResultOrder(body.get("order", "any"))
    except ValueError:
        raise BadRequest("range 'order' must be 'any', 'ascending' or 'descending'") from None


def _decode_key(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    query: KeyQuery[Any, Any] = KeyQuery.with_key(_required_key(body, key, "key"))
    return query.skip_cache() if _flag_field(body, "skip_cache", "key") else query


def _decode_range(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return RangeQuery(*_bounds(body, key), _order(body))


def _decode_window_key(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return WindowKeyQuery(
        _required_key(body, key, "window_key"), _int(body, "time_from"), _int(body, "time_to")
    )


def _decode_window_range(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    """Every key's windows starting in `[time_from, time_to]`; with a `key`, that key's
    windows or sessions only, over all of time unless the fields say otherwise."""
    if body.get("key") is None:
        if body.get("time_from") is None or body.get("time_to") is None:
            raise BadRequest(
                "a 'window_range' query needs 'time_from' and 'time_to' (64-bit integers, "
                "milliseconds), or a 'key': that key's entries over all of time"
            )
        return WindowRangeQuery(_int(body, "time_from"), _int(body, "time_to"))
    return WindowRangeQuery(
        _int_or(body, "time_from", INT64_MIN), _int_or(body, "time_to", INT64_MAX), key(body["key"])
    )


def _decode_timestamped_key(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    query: TimestampedKeyQuery[Any, Any] = TimestampedKeyQuery.with_key(
        _required_key(body, key, "timestamped_key")
    )
    return query.skip_cache() if _flag_field(body, "skip_cache", "timestamped_key") else query


def _decode_timestamped_range(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return TimestampedRangeQuery(*_bounds(body, key), _order(body))


def _decode_versioned_key(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return VersionedKeyQuery(
        _required_key(body, key, "versioned_key"), _int_or(body, "as_of", None)
    )


def _decode_multi_versioned_key(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return MultiVersionedKeyQuery(
        _required_key(body, key, "multi_versioned_key"),
        _int_or(body, "from_time", None),
        _int_or(body, "to_time", None),
        _flag_field(body, "ascending", "multi_versioned_key"),
    )


def _decode_versioned_range(body: Mapping[str, Any], key: KeyFromJson) -> Query[Any]:
    return VersionedRangeQuery(*_bounds(body, key), _int_or(body, "as_of", None))


def resume_range(
    query: RangeQuery[Any, Any], key: Any, serialize_key: Callable[[Any], bytes] | None = None
) -> tuple[RangeQuery[Any, Any], None]:
    """The range's rows from `key` on (inclusive) in its order, as a query of the same type
    (a `TimestampedRangeQuery` stays one); all of them for `None`."""
    if key is None:
        return query, None
    if query.result_order is ResultOrder.DESCENDING:
        return type(query)(query.lower_bound, key, query.result_order), None
    return type(query)(key, query.upper_bound, query.result_order), None


def _resume_versioned_range(
    query: VersionedRangeQuery[Any, Any],
    key: Any,
    serialize_key: Callable[[Any], bytes] | None = None,
) -> tuple[VersionedRangeQuery[Any, Any], None]:
    """The as-of range's rows from `key` on (inclusive, in key order); all for `None`."""
    if key is None:
        return query, None
    return VersionedRangeQuery(key, query.upper_bound, query.as_of_timestamp), None


def _stamped_json(value: ValueAndTimestamp[Any], to_json: ToJson) -> dict[str, Any]:
    return {"value": to_json(value.value), "timestamp": value.timestamp}


def _version_json(record: VersionedRecord[Any], to_json: ToJson) -> dict[str, Any]:
    return {
        "value": to_json(record.value),
        "timestamp": record.timestamp,
        "valid_to": record.valid_to,
    }


def _encode_value(result: Any, to_json: ToJson) -> Any:
    return to_json(result)


def _encode_stamped(result: Any, to_json: ToJson) -> Any:
    return None if result is None else _stamped_json(result, to_json)


def _encode_version(result: Any, to_json: ToJson) -> Any:
    return None if result is None else _version_json(result, to_json)


def _encode_versions(result: Any, to_json: ToJson) -> Any:
    with result as records:
        return [_version_json(record, to_json) for record in records]


def _encode_pairs(result: Any, to_json: ToJson) -> Any:
    with result as pairs:
        return [[to_json(k), to_json(v)] for k, v in pairs]


def _encode_stamped_pairs(result: Any, to_json: ToJson) -> Any:
    with result as pairs:
        return [[to_json(k), _stamped_json(v, to_json)] for k, v in pairs]


def _encode_versioned_pairs(result: Any, to_json: ToJson) -> Any:
    with result as pairs:
        return [[to_json(k), _version_json(v, to_json)] for k, v in pairs]


def _encode_windows(result: Any, to_json: ToJson) -> Any:
    with result as pairs:
        return [
            {"key": to_json(w.key), "start": w.start_ms, "end": w.end_ms, "value": to_json(v)}
            for w, v in pairs
            if isinstance(w, Windowed)
        ]


_HTTP = "iqstate-http"
BUILTIN_CODECS: dict[str, QueryCodec] = {
    codec.name: codec
    for codec in (
        QueryCodec("key", KeyQuery, _decode_key, _encode_value, _HTTP),
        QueryCodec("range", RangeQuery, _decode_range, _encode_pairs, _HTTP, resume_range),
        QueryCodec("window_key", WindowKeyQuery, _decode_window_key, _encode_pairs, _HTTP),
        QueryCodec("window_range", WindowRangeQuery, _decode_window_range, _encode_windows, _HTTP),
        QueryCodec(
            "timestamped_key",
            TimestampedKeyQuery,
            _decode_timestamped_key,
            _encode_stamped,
            _HTTP,
        ),
        QueryCodec(
            "timestamped_range",
            TimestampedRangeQuery,
            _decode_timestamped_range,
            _encode_stamped_pairs,
            _HTTP,
            resume_range,
        ),
        QueryCodec(
            "versioned_key", VersionedKeyQuery, _decode_versioned_key, _encode_version, _HTTP
        ),
        QueryCodec(
            "multi_versioned_key",
            MultiVersionedKeyQuery,
            _decode_multi_versioned_key,
            _encode_versions,
            _HTTP,
        ),
        QueryCodec(
            "versioned_range",
            VersionedRangeQuery,
            _decode_versioned_range,
            _encode_versioned_pairs,
            _HTTP,
            _resume_versioned_range,
        ),
    )
}


QUERY_FIELDS: dict[str, frozenset[str]] = {
    "key": frozenset({"type", "key", "skip_cache"}),
    "range": frozenset({"type", "lower", "upper", "order"}),
    "window_key": frozenset({"type", "key", "time_from", "time_to"}),
    "window_range": frozenset({"type", "key", "time_from", "time_to"}),
    "timestamped_key": frozenset({"type", "key", "skip_cache"}),
    "timestamped_range": frozenset({"type", "lower", "upper", "order"}),
    "versioned_key": frozenset({"type", "key", "as_of"}),
    "multi_versioned_key": frozenset({"type", "key", "from_time", "to_time", "ascending"}),
    "versioned_range": frozenset({"type", "lower", "upper", "as_of"}),
}
"""The fields of each built-in query type's JSON: any other is refused, since a misspelt
optional field (`asof`) would otherwise be an answer without it, not an error."""


STORE_QUERY_TYPES: dict[str, tuple[str, ...]] = {
    "key_value": ("key", "range"),
    "global_key_value": ("key", "range"),
    "timestamped_key_value": ("key", "range", "timestamped_key", "timestamped_range"),
    "versioned_key_value": ("key", "versioned_key", "multi_versioned_key", "versioned_range"),
    "window": ("window_key", "window_range"),
    "session": ("window_range",),
}
"""The built-in query types each type of store answers (plugin query types say nothing:
the store answers them or not). `key` and `range` on a timestamped store answer plain
values, `key` on a versioned store its current value."""


class Codecs:
    """Every codec: the built-in ones and those plugins registered (by type name)."""

    def __init__(self, registry: PluginRegistry) -> None:
        self.by_name: dict[str, QueryCodec] = {**BUILTIN_CODECS, **registry.query_codecs}
        self.by_type = {codec.query_type: codec for codec in self.by_name.values()}

    def decode(self, spec: StoreSpec, body: Any) -> Query[Any]:
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise BadRequest(
                f"'query' must be an object with a 'type' among {sorted(self.by_name)}"
            )
        codec = self.by_name.get(body["type"])
        if codec is None:
            raise BadRequest(
                f"unknown query type {body['type']!r}; known types: {sorted(self.by_name)}"
            )
        serves = STORE_QUERY_TYPES.get(spec.store_type, ())
        if BUILTIN_CODECS.get(codec.name) is codec and codec.name not in serves:
            kinds = [t for t, names in STORE_QUERY_TYPES.items() if codec.name in names]
            named = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if kinds[1:] else kinds)
            raise BadRequest(
                f"store {spec.name!r} is a {spec.store_type} store: {body['type']!r} queries "
                f"are for {named} stores; its query types are {sorted(serves)}"
            )
        fields = QUERY_FIELDS.get(codec.name) if BUILTIN_CODECS.get(codec.name) is codec else None
        if fields is not None and not fields.issuperset(body):
            unknown = ", ".join(repr(name) for name in sorted(set(body) - fields))
            raise BadRequest(
                f"a {codec.name!r} query has no field {unknown}; its fields are "
                f"{sorted(fields - {'type'})}"
            )
        try:
            query: Query[Any] = codec.decode(body, lambda value: key_from_json(spec, value))
        except BadRequest:
            raise
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"malformed {body['type']!r} query: {exc}") from exc
        except KeyError as exc:  # a plugin's decoder reading a field the body lacks
            raise BadRequest(f"malformed {body['type']!r} query: it has no field {exc}") from exc
        return query

    def encode(self, query: Query[Any], result: QueryResult[Any]) -> Any:
        codec = self.by_type.get(type(query))
        if codec is None:
            return to_json(result.result)
        return codec.encode(result.result, to_json)


def bound_from_json(body: Any) -> PositionBound:
    if body is None:
        return PositionBound.unbounded()
    return PositionBound.at(position_from_json(body))
