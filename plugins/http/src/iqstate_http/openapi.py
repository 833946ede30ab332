"""The OpenAPI 3.1 document of one service (served at `/openapi.json`).

It is built from the application's stores, so it says exactly what the service accepts:
each store's name, the routes that serve it, the JSON type of its keys and the query types
it answers (each with its fields and the shape of its result, `components.schemas`), and
the partitions a request may name, and each store's change stream (its parameters and the
events it sends). Clients and fuzzers generating requests from it reach the stores instead
of guessing their names. The bearer scheme is declared, and required on the data routes
when the service has a token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.subscription import DEFAULT_MAX_PENDING
from iqstate_http.change_request import MAX_PENDING_LIMIT
from iqstate_http.change_upstreams import END_EVENT
from iqstate_http.client_numbers import INT32_MAX, INT64_MAX
from iqstate_http.codecs import (
    BASE64,
    BUILTIN_CODECS,
    INT64_MIN,
    STORE_QUERY_TYPES,
    Codecs,
)
from iqstate_http.jsonin import MAX_DEPTH
from iqstate_http.key_reads import KEY_READS
from iqstate_http.limits import DEFAULT_MAX_ROWS, MAX_LIMIT

_INT64 = {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}
_FLOAT64_MAX = 1.7976931348623157e308
_BODY_KEY_SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "int64": _INT64,
    "float64": {"type": "number", "minimum": -_FLOAT64_MAX, "maximum": _FLOAT64_MAX},
    "bytes": {"type": "string", "pattern": BASE64, "contentEncoding": "base64"},
    "json": {
        "not": {"type": "null"},
        "description": f"any JSON value but null, nested at most {MAX_DEPTH} levels",
    },
}


def number_pattern(maximum: int) -> str:
    """A pattern of the decimal numbers from 0 to `maximum`, leading zeros allowed (what
    the service takes as a partition)."""
    digits = str(maximum)

    def any_digits(count: int) -> str:
        return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"

    shorter = [f"[0-9]{{1,{len(digits) - 1}}}"] if len(digits) > 1 else []
    lower = [  # the first i digits of `maximum`, a smaller digit, then any
        digits[:i]
        + ("0" if digit == "1" else f"[0-{int(digit) - 1}]")
        + any_digits(len(digits) - i - 1)
        for i, digit in enumerate(digits)
        if digit != "0"
    ]
    return f"^0*({'|'.join([*shorter, *lower, digits])})$"


_POSITION = {
    "type": "object",
    "description": "{topic: {partition: offset}}",
    "propertyNames": {"minLength": 1},
    "additionalProperties": {
        "type": "object",
        "propertyNames": {"pattern": number_pattern(INT32_MAX)},
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
    },
}
_NULLABLE_POSITION = {"anyOf": [_POSITION, {"type": "null"}]}
_HOSTED = {
    "type": "object",
    "additionalProperties": {"type": "array", "items": {"type": "integer"}},
}
_INSTANCE = {
    "type": "object",
    "required": ["host", "port", "active", "standby"],
    "properties": {
        "host": {"type": "string"},
        "port": {"type": "integer"},
        "active": _HOSTED,
        "standby": _HOSTED,
    },
}
_KEY_PLACE = {
    "type": "object",
    "required": ["active", "standbys", "partition"],
    "properties": {
        "active": {"type": ["string", "null"], "description": "host:port, null if none"},
        "standbys": {"type": "array", "items": {"type": "string"}},
        "partition": {"type": "integer"},
    },
}
_STORE = {
    "type": "object",
    "required": ["type", "partitions", "key_serde", "value_serde"],
    "properties": {
        "type": {"enum": list(STORE_QUERY_TYPES)},
        "partitions": {"type": "integer", "description": "1 for a global_key_value store"},
        "key_serde": {"type": "string"},
        "value_serde": {"type": "string"},
        "partitioner": {
            "enum": ["default", "custom"],
            "description": "default: Kafka's murmur2 of the serialized key (clients may "
            "compute a key's partition); custom: only the service knows",
        },
        "window_size_ms": {"type": "integer", "description": "window stores"},
        "retention_ms": {"type": "integer", "description": "window and session stores"},
        "history_retention_ms": {"type": "integer", "description": "versioned_key_value stores"},
    },
}
_LAGS = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "required": ["current", "end", "lag", "rebuilt"],
            "properties": {
                "current": {"type": "integer"},
                "end": {"type": ["integer", "null"], "description": "null: unknown"},
                "lag": {"type": ["integer", "null"], "description": "null: unknown"},
                "rebuilt": {"type": "boolean"},
            },
        },
    },
}
_CLUSTER = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["host", "port", "live", "departure", "replicas"],
        "properties": {
            "host": {"type": "string"},
            "port": {"type": "integer"},
            "live": {"type": "boolean"},
            "departure": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["reason", "seconds_ago"],
                        "properties": {
                            "reason": {"enum": ["left", "silent"]},
                            "seconds_ago": {"type": "number"},
                        },
                    },
                ],
            },
            "replicas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["store", "partition", "role", "lag"],
                    "properties": {
                        "store": {"type": "string"},
                        "partition": {"type": "integer"},
                        "role": {"enum": ["RUNNING", "RESTORING", "CUT_OFF", "STANDBY"]},
                        "lag": {"type": ["integer", "null"]},
                    },
                },
            },
        },
    },
}
_PARTITIONS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["store", "partition", "role", "position"],
        "properties": {
            "store": {"type": "string"},
            "partition": {"type": "integer"},
            "role": {"type": "string"},
            "position": _NULLABLE_POSITION,
        },
    },
}
_HEALTH = {
    "type": "object",
    "required": ["status", "state"],
    "properties": {
        "status": {"enum": ["ok", "degraded", "unavailable"]},
        "state": {"type": "string"},
        "broker_silence_s": {
            "type": "number",
            "description": "seconds since this instance last heard from Kafka (cluster mode "
            "only); past the liveness timeout the status is degraded",
        },
    },
}
_READY = {
    "type": "object",
    "required": ["ready", "state"],
    "properties": {
        "ready": {"type": "boolean"},
        "state": {"type": "string"},
        "reason": {"type": "string", "description": "why not (only when not ready)"},
    },
}
_ROLE = {"enum": ["RUNNING", "RESTORING", "CUT_OFF", "STANDBY", None]}
_ANSWERED_BY = {
    "host": {"type": "string", "description": "host:port of the instance that answered"},
    "role": {**_ROLE, "description": "the answering replica's role (null: none answered)"},
    "lag": {"type": ["integer", "null"], "description": "its changelog lag (null: unknown)"},
}
_KEY_FIELDS = ["value", "partition", "position", "host", "role", "lag"]
_WHERE_FROM = {"partition": {"type": "integer"}, "position": _NULLABLE_POSITION, **_ANSWERED_BY}
_KEY_ANSWER = {
    "type": "object",
    "required": _KEY_FIELDS,
    "properties": {
        "value": {"description": "the value as JSON; null for an absent key"},
        **_WHERE_FROM,
    },
}
_STAMPED_KEY_ANSWER = {
    "type": "object",
    "required": [*_KEY_FIELDS, "timestamp"],
    "description": "a timestamped store's key",
    "properties": {
        "value": {"description": "the value as JSON; null for an absent key"},
        "timestamp": {
            "type": ["integer", "null"],
            "description": "the timestamp the value was put with (ms); null for an absent key",
        },
        **_WHERE_FROM,
    },
}
_VERSIONED_KEY_ANSWER = {
    "type": "object",
    "required": [*_KEY_FIELDS, "timestamp", "valid_to"],
    "description": "a versioned store's key: its current version, or the one valid at as_of",
    "properties": {
        "value": {"description": "the version's value as JSON; null for an absent key"},
        "timestamp": {
            "type": ["integer", "null"],
            "description": "the version's timestamp (ms); null for an absent key",
        },
        "valid_to": {
            "type": ["integer", "null"],
            "description": "when the version stopped being valid (ms, exclusive); null for "
            "the current version or an absent key",
        },
        **_WHERE_FROM,
    },
}
_PAGE = {
    "type": "object",
    "required": ["store", "rows", "next", "position"],
    "description": 'a merged page ("merge": true)',
    "properties": {
        "store": {"type": "string"},
        "rows": {"type": "array", "items": {"type": "array"}},
        "next": {"type": ["string", "null"], "description": "the next page's cursor"},
        "position": _NULLABLE_POSITION,
    },
}
_QUERY_ANSWER = {
    "type": "object",
    "required": ["store", "partitions", "position"],
    "properties": {
        "store": {"type": "string"},
        "position": _NULLABLE_POSITION,
        "partitions": {
            "type": "object",
            "description": "per partition: its result, or its failure",
            "additionalProperties": {
                "type": "object",
                "required": ["ok", "position"],
                "properties": {
                    "ok": {"type": "boolean"},
                    "value": {
                        "description": "the result as JSON, shaped by the query type "
                        "(components.schemas.Result*)"
                    },
                    "failure": {"type": "string"},
                    "message": {"type": "string"},
                    "position": _NULLABLE_POSITION,
                    "execution_info": {"type": "array", "items": {"type": "string"}},
                    **_ANSWERED_BY,
                },
            },
        },
    },
}
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "partitions": {
                    "type": "object",
                    "description": "a merged page's partitions that could not answer",
                },
            },
        }
    },
}
_ERROR_TEXTS = {
    "400": "malformed request: a field, a key or a partition the store does not accept",
    "404": "unknown store",
    "413": "request body over the limit",
    "422": "an unmerged answer over max_rows rows (too_many_rows): page it with merge",
    "500": "an unexpected failure (the connection is closed after it)",
    "503": "the application is not running, no replica of a partition may answer, or the "
    "instance is busy with range requests (busy, with Retry-After)",
}


_PAGED = frozenset({"range", "timestamped_range", "versioned_range"})
"""The built-in query types a merged page answers (plugins add theirs, undescribed)."""
_JSON = {"description": "a key or value as JSON, through the store's serde"}
_STAMPED = {
    "type": "object",
    "required": ["value", "timestamp"],
    "properties": {"value": _JSON, "timestamp": _INT64},
}
_VERSION = {
    "type": "object",
    "required": ["value", "timestamp", "valid_to"],
    "description": "valid from timestamp (inclusive) to valid_to (exclusive; null: current)",
    "properties": {
        "value": _JSON,
        "timestamp": _INT64,
        "valid_to": {"anyOf": [_INT64, {"type": "null"}]},
    },
}


def _rows(value: dict[str, Any]) -> dict[str, Any]:
    """`[[key, value], ...]` rows, the value as `value` describes it."""
    row = {"type": "array", "prefixItems": [_JSON, value], "minItems": 2, "maxItems": 2}
    return {"type": "array", "items": row}


_RESULTS: dict[str, dict[str, Any]] = {
    "key": {**_JSON, "description": "the value; null for an absent key"},
    "range": _rows(_JSON),
    "window_key": {
        "type": "array",
        "description": "[[window start (ms), value], ...]",
        "items": {"type": "array", "prefixItems": [_INT64, _JSON], "minItems": 2, "maxItems": 2},
    },
    "window_range": {
        "type": "array",
        "description": "windows (sessions, in a session store) by start",
        "items": {
            "type": "object",
            "required": ["key", "start", "end", "value"],
            "properties": {"key": _JSON, "start": _INT64, "end": _INT64, "value": _JSON},
        },
    },
    "timestamped_key": {"anyOf": [_STAMPED, {"type": "null"}]},
    "timestamped_range": _rows(_STAMPED),
    "versioned_key": {"anyOf": [_VERSION, {"type": "null"}]},
    "multi_versioned_key": {"type": "array", "items": _VERSION},
    "versioned_range": _rows(_VERSION),
}
"""The result of each built-in query type as JSON: a partition's `"value"`, and a merged
page's rows for the types it pages (`components.schemas`, `Result` + the type in camel
case)."""


def _result_name(query_type: str) -> str:
    return "Result" + "".join(part.capitalize() for part in query_type.split("_"))


_ACCEPTABLE_LAG = {
    "name": "acceptable_lag",
    "in": "query",
    "required": False,
    "description": "offsets a standby may lag and still answer (default: the running active)",
    "schema": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
}


_AS_OF = {
    "name": "as_of",
    "in": "query",
    "required": False,
    "description": "the version valid at this instant (ms since the epoch; default: the "
    "current version)",
    "schema": {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
}


def _one_of(options: list[dict[str, Any]]) -> dict[str, Any]:
    if not options:
        return {"not": {}, "description": "no store is declared"}
    return options[0] if len(options) == 1 else {"oneOf": options}


def _serde(serde: Any) -> str:
    return str(getattr(serde, "name", type(serde).__name__))


def _body_key(spec: StoreSpec) -> dict[str, Any]:
    """A key in a JSON body (never null)."""
    name = _serde(spec.key_serde)
    return _BODY_KEY_SCHEMAS.get(name, {"description": f"a key serde {name!r} accepts"})


def _queries(spec: StoreSpec) -> list[dict[str, Any]]:
    """The query bodies of the built-in query types the store answers."""
    key = _body_key(spec)
    bound = {"anyOf": [key, {"type": "null"}]}
    time = {"anyOf": [_INT64, {"type": "null"}]}
    order = {"enum": ["any", "ascending", "descending"]}

    def query(name: str, required: list[str], about: str, **fields: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "description": f"{about}; result: #/components/schemas/{_result_name(name)}",
            "required": ["type", *required],
            "properties": {"type": {"const": name}, **fields},
            "additionalProperties": False,
        }

    entries = "sessions" if spec.store_type == "session" else "windows"
    window_range = query(
        "window_range",
        [],
        f"{entries} starting in [time_from, time_to] (ms): every key's, or with key that "
        "key's only (the times then default to all of time)",
        key=bound,
        time_from=time,
        time_to=time,
    )
    window_range["anyOf"] = [
        {"required": ["key"], "properties": {"key": key}},
        {
            "required": ["time_from", "time_to"],
            "properties": {"time_from": _INT64, "time_to": _INT64},
        },
    ]
    bodies = {
        "key": query("key", ["key"], "the value of one key (a versioned store's current "
                     "value)", key=key, skip_cache={"type": "boolean"}),
        "range": query("range", [], "the pairs from lower to upper (inclusive; null: open)",
                       lower=bound, upper=bound, order=order),
        "window_key": query("window_key", ["key", "time_from", "time_to"], "one key's "
                            "windows starting in [time_from, time_to] (ms)", key=key,
                            time_from=_INT64, time_to=_INT64),
        "window_range": window_range,
        "timestamped_key": query("timestamped_key", ["key"], "the value of one key with its "
                                 "timestamp", key=key, skip_cache={"type": "boolean"}),
        "timestamped_range": query("timestamped_range", [], "the pairs from lower to upper "
                                   "with their timestamps", lower=bound, upper=bound,
                                   order=order),
        "versioned_key": query("versioned_key", ["key"], "the version of one key valid at "
                               "as_of (ms; null: the current one)", key=key, as_of=time),
        "multi_versioned_key": query(
            "multi_versioned_key", ["key"], "every version of one key valid at some instant "
            "of [from_time, to_time] (ms; null: open; from_time at most to_time), newest "
            "first unless ascending", key=key, from_time=time, to_time=time,
            ascending={"type": "boolean"},
        ),
        "versioned_range": query("versioned_range", [], "the keys from lower to upper with "
                                 "their versions valid at as_of (null: the current ones)",
                                 lower=bound, upper=bound, as_of=time),
    }  # fmt: skip
    return [bodies[name] for name in STORE_QUERY_TYPES.get(spec.store_type, ())]


def _query_requests(spec: StoreSpec, max_rows: int) -> list[dict[str, Any]]:
    """A store's request bodies: an answer per partition, and (for key-value stores) a
    merged page of a range."""
    partition = {"type": "integer", "minimum": 0, "maximum": spec.partitions - 1}
    common = {
        "store": {"const": spec.name},
        "partitions": {
            "description": "the partitions to ask (default: all)",
            "anyOf": [{"type": "array", "items": partition}, {"type": "null"}],
        },
        "bound": {**_NULLABLE_POSITION, "description": "the position to be up to"},
        "require_active": {"type": "boolean"},
        "execution_info": {"type": "boolean"},
        "scope": {
            "enum": ["cluster", "local"],
            "description": "cluster (default): every partition, wherever it lives; local: "
            "this instance's replicas only",
        },
        "acceptable_lag": {
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": INT64_MAX}, {"type": "null"}],
            "description": "offsets a standby may lag and still answer (null: running actives "
            "only)",
        },
        "max_rows": {
            "anyOf": [{"type": "integer", "minimum": 1, "maximum": max_rows}, {"type": "null"}],
            "description": "the most rows of this answer (null: the service's max_rows)",
        },
    }
    requests = [
        {
            "type": "object",
            "required": ["store", "query"],
            "additionalProperties": False,
            "properties": {
                **common,
                "query": _one_of(_queries(spec)),
                "merge": {"const": False},
            },
            "not": {"anyOf": [{"required": ["limit"]}, {"required": ["cursor"]}]},
        }
    ]
    ranges = [q for q in _queries(spec) if q["properties"]["type"]["const"] in _PAGED]
    if ranges:
        requests.append(
            {
                "type": "object",
                "required": ["store", "query", "merge"],
                "additionalProperties": False,
                "description": "one page of rows merged across partitions in key order",
                "properties": {
                    **common,
                    "query": _one_of(ranges),
                    "merge": {"const": True},
                    "limit": {
                        "anyOf": [
                            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                            {"type": "null"},
                        ],
                        "description": "rows of the page (null: 1,000)",
                    },
                    "cursor": {
                        "type": ["string", "null"],
                        "description": "the 'next' of the previous page, as it came (null "
                        "or empty: the first page)",
                    },
                },
            }
        )
    return requests


def _path_key(spec: StoreSpec) -> dict[str, Any] | None:
    """The `{key}` path parameter: the key as text; `None` for `json` keys, whose GET routes
    take JSON text, which a path parameter's schema cannot describe (the document lists the
    JSON-bodied routes for them instead)."""
    name = _serde(spec.key_serde)
    if name == "json":
        return None
    schema = _BODY_KEY_SCHEMAS.get(name, {"type": "string"})
    return {
        "name": "key",
        "in": "path",
        "required": True,
        "schema": {k: v for k, v in schema.items() if k != "contentEncoding"},
    }


_END = {
    "type": "object",
    "required": ["reason", "message", "cursor"],
    "description": "why a change stream ended by itself; resume from cursor (Last-Event-ID)",
    "properties": {
        "reason": {
            "enum": ["lagged", "unavailable", "ended"],
            "description": "lagged: the subscriber fell more than max_pending events behind; "
            "unavailable: a partition found no replica to follow it; ended: a forwarded "
            "stream whose partitions left this instance",
        },
        "message": {"type": "string"},
        "cursor": {"type": "string"},
        "no_replica": {
            "type": "boolean",
            "description": "true when no replica served a partition lately (none found for "
            "the resume timeout, or, one hop away, none hosted there); absent otherwise",
        },
    },
}
_WINDOWED = frozenset({"window", "session"})
_STAMPED_TYPES = frozenset({"timestamped_key_value", "versioned_key_value"})


def _key_text(spec: StoreSpec) -> dict[str, Any]:
    """A key in a query parameter, as the key route takes it in its path."""
    name = _serde(spec.key_serde)
    if name == "json":
        return {"type": "string", "contentMediaType": "application/json"}
    schema = _BODY_KEY_SCHEMAS.get(name, {"type": "string"})
    return {k: v for k, v in schema.items() if k != "contentEncoding"}


def _change_batch(spec: StoreSpec) -> dict[str, Any]:
    """The `data` of a store's change event: one committed batch of one partition."""
    fields: dict[str, Any] = {
        "key": {**_body_key(spec), "description": "the key as JSON"},
        "value": {"description": "the value as JSON; null: the key was deleted"},
    }
    required = ["key", "value"]
    if spec.store_type in _WINDOWED:
        fields["start"] = {**_INT64, "description": "the window's or session's start (ms)"}
        fields["end"] = {**_INT64, "description": "its end (ms, exclusive)"}
        required += ["start", "end"]
    if spec.store_type in _STAMPED_TYPES:
        fields["timestamp"] = {**_INT64, "description": "the timestamp of the put (ms)"}
    return {
        "type": "object",
        "required": ["partition", "position", "snapshot", "changes"],
        "properties": {
            "partition": {"type": "integer", "minimum": 0, "maximum": spec.partitions - 1},
            "position": _NULLABLE_POSITION,
            "snapshot": {
                "type": "boolean",
                "description": "true: every matching key of the partition at position (the "
                "first event of each partition, or where the replica could not replay): "
                "replace what you hold of the partition",
            },
            "changes": {
                "type": "array",
                "items": {"type": "object", "required": required, "properties": fields},
            },
        },
    }


def _change_parameters(spec: StoreSpec) -> list[dict[str, Any]]:
    """The query parameters and header of a store's change stream."""
    key = _key_text(spec)
    numbers = "|".join(str(number) for number in range(spec.partitions))

    def query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False, "description": description,
                "schema": schema}  # fmt: skip

    return [
        query("key", "follow this key only (alone: no lower, upper or prefix)", key),
        query("lower", "follow the keys from lower (inclusive, in the store's byte order)", key),
        query("upper", "follow the keys up to upper (inclusive)", key),
        query("prefix", "follow the keys whose serialized form starts with prefix's", key),
        query(
            "partitions",
            "comma-separated partitions to follow (default: all; a key's partition only)",
            {"type": "string", "pattern": f"^({numbers})(,({numbers}))*$"},
        ),
        {**_ACCEPTABLE_LAG, "description": "offsets a standby may lag and still be followed "
         "(default: the running actives)"},
        query(
            "max_pending",
            "events this subscriber may leave unread before the stream ends with lagged",
            {"type": "integer", "minimum": 1, "maximum": MAX_PENDING_LIMIT,
             "default": DEFAULT_MAX_PENDING},
        ),
        query("cursor", "resume after the event with this id (Last-Event-ID wins over it)",
              {"type": "string"}),
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"},
         "description": "resume after the event with this id (EventSource sends it when it "
         "reconnects)"},
    ]  # fmt: skip


def _change_events(spec: StoreSpec) -> dict[str, Any]:
    """One event of a store's change stream: a batch (unnamed), or the final `end`."""

    def event(name: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["data", "id"],
            "properties": {
                "event": name,
                "id": {"type": "string", "description": "the merged cursor after this event"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": data,
                },
            },
        }

    batch = event({"const": "message", "description": "unnamed"}, _change_batch(spec))
    end = event({"const": END_EVENT}, {"$ref": "#/components/schemas/ChangeStreamEnd"})
    end["required"] = ["event", "data", "id"]
    return {"oneOf": [batch, end], "description": "a Server-Sent Event; an idle stream gets a "
            "keep-alive comment every 15 s (by default)"}  # fmt: skip


class _Operations:
    """Operations sharing the service's error responses and security requirement."""

    def __init__(self, secured: bool) -> None:
        self.secured = secured

    def _errors(self, codes: list[str]) -> dict[str, Any]:
        errors = {
            code: {
                "description": _ERROR_TEXTS[code],
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
            for code in codes
        }
        if self.secured:
            errors["401"] = {
                "description": "the bearer token is missing or wrong",
                "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        return errors

    def operation(
        self,
        summary: str,
        answer: dict[str, Any],
        *,
        parameters: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
        public: bool = False,
        media: str = "application/json",
    ) -> dict[str, Any]:
        codes = ["400", "404", "500", "503"] + (["413", "422"] if body is not None else [])
        operation: dict[str, Any] = {
            "summary": summary,
            "responses": {
                "200": {"description": "ok", "content": {media: {"schema": answer}}},
                **({"503": self._errors(["503"])["503"]} if public else self._errors(codes)),
            },
        }
        if parameters:
            operation["parameters"] = parameters
        if body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
        if self.secured and not public:
            operation["security"] = [{"bearer": []}]
        return operation


def openapi_document(
    stores: Mapping[str, StoreSpec],
    codecs: Codecs,
    *,
    secured: bool,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> dict[str, Any]:
    """The document for a service over `stores` (`secured`: it requires a bearer token;
    `max_rows`: the most rows of an unmerged answer)."""
    ops = _Operations(secured)
    specs = [stores[name] for name in sorted(stores)]
    store_parameter = {
        "name": "store",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": [spec.name for spec in specs]},
    }
    plugin_types = sorted(set(codecs.by_name) - set(BUILTIN_CODECS))
    paths: dict[str, Any] = {
        "/": {"get": ops.operation("the state browser page", {"type": "string"},
                                   public=True, media="text/html")},
        "/openapi.json": {"get": ops.operation("this document", {"type": "object"}, public=True)},
        "/v1/health": {"get": _with_503(
            ops.operation("whether the application is running and in contact", _HEALTH,
                          public=True), _HEALTH)},
        "/v1/ready": {"get": _with_503(
            ops.operation("whether to send this instance traffic (for load balancers)",
                          _READY, public=True), _READY)},
        "/metrics": {"get": ops.operation(
            "Prometheus' text format: queries, durations, requests, lags, live instances",
            {"type": "string"}, media="text/plain")},
        "/v1/query": {
            "post": {
                **ops.operation(
                    "run an IQv2 request", {"anyOf": [_QUERY_ANSWER, _PAGE]},
                    body={"$ref": "#/components/schemas/QueryRequest"},
                ),
                "description": "Per-partition failures are results with \"ok\": false. "
                "Query types that plugins registered are accepted too (their fields are "
                "the plugin's): " + (", ".join(plugin_types) or "none installed") + ".",
            }
        },
        "/v1/stores": {"get": ops.operation("the stores: kind, partitions, serdes",
                                            {"type": "object", "additionalProperties": _STORE})},
        "/v1/metadata": {"get": ops.operation("every instance and what it hosts",
                                              {"type": "array", "items": _INSTANCE})},
        "/v1/metadata/stores/{store}": {
            "get": ops.operation("the instances hosting a store",
                                 {"type": "array", "items": _INSTANCE},
                                 parameters=[store_parameter])
        },
        "/v1/metadata/key": {
            "post": ops.operation(
                "where a key lives (the key as JSON)", _KEY_PLACE,
                body={"$ref": "#/components/schemas/KeyPlaceRequest"},
            )
        },
        "/v1/lags": {"get": ops.operation("this instance's partitions' changelog lag", _LAGS)},
        "/v1/cluster": {"get": ops.operation(
            "every instance as this one sees it: live ones with each replica's role and lag, "
            "then those recently gone", _CLUSTER)},
        "/v1/partitions": {"get": ops.operation("this instance's partitions: role, position",
                                                _PARTITIONS)},
    }  # fmt: skip
    for spec in specs:
        key = _path_key(spec)
        if key is None:
            continue
        paths[f"/v1/metadata/stores/{spec.name}/keys/{{key}}"] = {
            "get": ops.operation(f"where a key of {spec.name!r} lives", _KEY_PLACE,
                                 parameters=[key])
        }  # fmt: skip
        read = KEY_READS.get(spec.store_type)
        if read is not None:
            if read.at is not None:
                answer, parameters = _VERSIONED_KEY_ANSWER, [key, _ACCEPTABLE_LAG, _AS_OF]
            else:
                answer = _STAMPED_KEY_ANSWER if read.stamped else _KEY_ANSWER
                parameters = [key, _ACCEPTABLE_LAG]
            paths[f"/v1/stores/{spec.name}/keys/{{key}}"] = {
                "get": ops.operation(f"look a key of {spec.name!r} up", answer,
                                     parameters=parameters)
            }  # fmt: skip
    for spec in specs:
        paths[f"/v1/stores/{spec.name}/changes"] = {
            "get": {
                **ops.operation(
                    f"follow {spec.name!r}: its committed changes as Server-Sent Events",
                    _change_events(spec),
                    parameters=_change_parameters(spec),
                    media="text/event-stream",
                ),
                "description": "A snapshot of the matching keys per partition, then each "
                "committed batch that changed one, in commit order, merged from every "
                "partition's host. The stream does not end while the pipeline runs; when it "
                "ends by itself, its last event is `end` (components.schemas.ChangeStreamEnd). "
                "Bad input is a 400 before any event.",
            }
        }
    key_place = [
        {
            "type": "object",
            "required": ["store", "key"],
            "properties": {"store": {"const": spec.name}, "key": _body_key(spec)},
        }
        for spec in specs
    ]
    return {
        "openapi": "3.1.0",
        "info": {"title": "iqstate query service", "version": "1"},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": _ERROR,
                "QueryRequest": _one_of(
                    [body for spec in specs for body in _query_requests(spec, max_rows)]
                ),
                "KeyPlaceRequest": _one_of(key_place),
                "ChangeStreamEnd": _END,
                **{_result_name(name): schema for name, schema in _RESULTS.items()},
            },
        },
    }


def _with_503(operation: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`operation` whose 503 answer has the same shape as its 200 (a state, not an error)."""
    operation["responses"]["503"] = {
        "description": "not available",
        "content": {"application/json": {"schema": schema}},
    }
    return operation
