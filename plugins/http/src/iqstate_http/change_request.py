"""A request of `GET /v1/stores/{store}/changes`, read and checked before its stream starts,
so bad input is a 400 naming what is wrong (and a forwarded request for partitions this
instance may not serve a 503), never an event stream that ends at once.

Query parameters: `key`, or `lower`/`upper`, or `prefix` (each in the form the key route
takes keys: decimal for `int64`, JSON text for `json`, base64 for `bytes`); `cursor` (the
`Last-Event-ID` header wins over it: a browser's `EventSource` sends the header when it
reconnects, with the URL it started with); `partitions` (comma-separated); `acceptable_lag`;
`max_pending`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from iqstate import InvalidCursorError
from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.cursor import resumed_cursor
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.subscription import DEFAULT_MAX_PENDING
from iqstate_http.change_stream import ChangeRequest
from iqstate_http.client_numbers import INT64_MAX
from iqstate_http.codecs import BadRequest, key_from_path, whole_number_parameter
from iqstate_http.errors import ApiError
from iqstate_http.forwarding import FORWARDED_HEADER
from iqstate_http.replica_choice import ReplicaChoice

FILTERS = ("key", "lower", "upper", "prefix")
_KNOWN = frozenset((*FILTERS, "cursor", "partitions", "acceptable_lag", "max_pending"))
MAX_PENDING_LIMIT = 100_000
"""The most events a subscriber may ask to leave unsent before it is disconnected."""


def change_request(
    application_id: str, spec: StoreSpec, request: Request, replicas: ReplicaChoice
) -> ChangeRequest:
    """The checked request; `BadRequest` or `ApiError` naming what is wrong."""
    params = request.query_params
    for name in params:
        if name not in _KNOWN:
            raise BadRequest(f"unknown query parameter {name!r}; known: {sorted(_KNOWN)}")
        if len(params.getlist(name)) > 1:
            raise BadRequest(f"query parameter {name!r} is given more than once")
    texts = {name: params[name] for name in FILTERS if name in params}
    filters = {name: key_from_path(spec, text) for name, text in texts.items()}
    try:
        keys = KeyFilter.build(spec, **{name: filters.get(name) for name in FILTERS})
    except ValueError as error:
        raise BadRequest(str(error)) from error
    text = request.headers.get("last-event-id") or params.get("cursor") or None
    try:
        cursor = resumed_cursor(text, application_id, spec.name, keys.identity, spec.partitions)
    except InvalidCursorError as error:
        raise ApiError(400, "invalid_cursor", str(error)) from error
    partitions = _partitions(spec, params.get("partitions"), keys.partition)
    lag = _natural(params.get("acceptable_lag"), "acceptable_lag", None)
    forwarded = FORWARDED_HEADER in request.headers
    if forwarded:
        for partition in partitions:
            if replicas.local(spec.name, partition) not in replicas.candidates(
                spec.name, partition, lag
            ):
                reason, message = replicas.why_none(spec.name, partition, lag, local_only=True)
                raise ApiError(503, reason.name.lower(), message)
    max_pending = _natural(
        params.get("max_pending"), "max_pending", DEFAULT_MAX_PENDING, (1, MAX_PENDING_LIMIT)
    )
    return ChangeRequest(
        store=spec.name,
        filters=filters,
        filter_query=texts,
        cursor=cursor,
        partitions=partitions,
        acceptable_lag=lag,
        max_pending=max_pending,
        forwarded=forwarded,
        authorization=request.headers.get("authorization"),
    )


def _natural(
    text: str | None, name: str, default: Any, bounds: tuple[int, int] = (0, INT64_MAX)
) -> Any:
    """`text` as a whole number within `bounds` (both inclusive), `default` if absent."""
    return default if text is None else whole_number_parameter(text, name, *bounds)


def _partitions(spec: StoreSpec, text: str | None, keyed: int | None) -> tuple[int, ...]:
    """The partitions to follow: those asked for (in range), else all; a key's only."""
    if text is None:
        wanted = list(range(spec.partitions))
    else:
        wanted = []
        for item in text.split(","):
            number = _natural(item.strip(), "partitions", None)
            if not 0 <= number < spec.partitions:
                raise BadRequest(
                    f"partition {number} is out of range: store {spec.name!r} has partitions "
                    f"0-{spec.partitions - 1}"
                )
            wanted.append(number)
    if keyed is not None:
        wanted = [number for number in wanted if number == keyed]
    if not wanted:
        raise BadRequest(f"no partition of store {spec.name!r} to follow")
    return tuple(sorted(set(wanted)))
