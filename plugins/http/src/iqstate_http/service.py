"""The ASGI application: IQv2 over HTTP for one `Application`.

Every error is a JSON body `{"error": {"code": ..., "message": ...}}` (`errors`) with 400
(malformed request, unknown query type, a key that does not parse, a partition out of
range), 401 (missing or wrong bearer token), 404 (unknown store or route), 405 (method),
413 (body over the limit) or 503 (the application is not running); an unexpected failure
is a 500 with a message and never a stack trace.

Key lookups run on the event loop (one point read: cheaper than a hop to a thread);
`POST /v1/query` runs its query and encodes its answer in a worker thread, so a long range
scan never stalls the requests around it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hmac
import json
import re
import ssl
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iqstate import Application, AppState, FailureReason, Query, StateQueryRequest
from iqstate.runtime.metadata import InstanceStatus, StreamsMetadata
from iqstate.runtime.partitioner import follows_kafka_default
from iqstate.runtime.querying import keyed
from iqstate.runtime.spec import StoreSpec
from iqstate_http import jsonin
from iqstate_http.admission import Gate, RangeLimits
from iqstate_http.change_request import change_request
from iqstate_http.change_stream import ChangeStream, StreamSettings
from iqstate_http.client_numbers import INT64_MAX, whole_number
from iqstate_http.codecs import (
    BadRequest,
    Codecs,
    bound_from_json,
    failure_reason_of,
    json_bytes,
    key_from_json,
    key_from_path,
    position_json_bytes,
    position_to_json,
)
from iqstate_http.errors import (
    HANDLERS,
    ApiError,
    api_error,
    api_error_response,
    unexpected_error_response,
)
from iqstate_http.forwarding import FORWARDED_HEADER, Forwarded, Forwarder
from iqstate_http.key_params import NONE_ASKED, KeyParams, key_params
from iqstate_http.key_reads import ANSWER, ASKED_INSTEAD, KEY_READS, KeyRead
from iqstate_http.limits import DEFAULT_MAX_BODY, DEFAULT_MAX_ROWS
from iqstate_http.metrics import PROMETHEUS_TEXT, ServiceMetrics
from iqstate_http.openapi import openapi_document
from iqstate_http.paging import page_limit
from iqstate_http.query_runner import QueryOptions, QueryRunner
from iqstate_http.raw_paths import EncodedSlashStores, misnamed_store
from iqstate_http.replica_choice import RUNNING, Replica, ReplicaChoice

PAGE = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
_CHALLENGE = 'Bearer realm="iqstate"'
T = TypeVar("T")
_FINAL_EVENT_GRACE = 2.0
"""Seconds a change stream has to send its final event when the server shuts down."""


def _metadata_json(app: Application, metadata: StreamsMetadata) -> dict[str, Any]:
    """One instance: its endpoint and, per store, the partitions it hosts as active / standby."""
    by_topic = {app.changelog_partition(name, 0).topic: name for name in app.stores}

    def per_store(partitions: Any) -> dict[str, list[int]]:
        hosted: dict[str, list[int]] = {}
        for tp in partitions:
            hosted.setdefault(by_topic[tp.topic], []).append(tp.partition)
        return {store: sorted(numbers) for store, numbers in sorted(hosted.items())}

    return {
        "host": metadata.host_info.host,
        "port": metadata.host_info.port,
        "active": per_store(metadata.topic_partitions),
        "standby": per_store(metadata.standby_topic_partitions),
    }


def _status_json(status: InstanceStatus) -> dict[str, Any]:
    """One instance of `/v1/cluster`: live with its replicas, or how it went away."""
    departure = status.departure
    return {
        "host": status.host_info.host,
        "port": status.host_info.port,
        "live": status.live,
        "departure": None
        if departure is None
        else {"reason": departure.reason, "seconds_ago": round(departure.seconds_ago, 1)},
        "replicas": [
            {"store": store, "partition": partition, "role": replica.state, "lag": replica.lag}
            for store, partitions in sorted(status.replicas.items())
            for partition, replica in sorted(partitions.items())
        ],
    }


class _Text(Convertor[str]):
    """A path parameter of any text, newlines and slashes included (Starlette's `path`
    stops at a newline): a key in a URL is whatever the store's keys are."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("text", _Text())

_KEY_ROUTE_PREFIX = "/v1/stores/"
KEY_ROUTE = "/v1/stores/{store}/keys/{key}"
"""The key route's template, as `iqstate_http_requests_total` names it."""
OTHER_ROUTE = "other"
"""The route label of a request that matched no route."""
_FORWARDED = FORWARDED_HEADER.encode()
_STORE_FAILED = FailureReason.STORE_EXCEPTION.name.lower()
_RUNNING, _NO_LAG = json_bytes(RUNNING), b"0"
"""The role and lag of the key route's answer from this instance's running active (the
busiest answer)."""


class KeyRouteFirst:
    """The service's ASGI app: a `GET` of the key route (the busiest) answered before
    Starlette's middleware, routing and `Response` (measured in bench/http_service.py), from
    this instance's running active or forwarded to the instance that may answer; every
    other request, and every key request that needs a token checked, goes to the routed
    app. Errors are answered as the routed app answers them (`errors.HANDLERS`)."""

    def __init__(self, service: QueryService, routed: ASGIApp) -> None:
        self.service, self.routed = service, routed
        self.counted = CountedRequests(routed, service.metrics.record_request)
        self.answered = 0
        """Key requests answered `200` here: counted on the event loop's thread only, in an
        integer (the busiest count, kept off the metrics' queue)."""
        service.metrics.count_elsewhere(KEY_ROUTE, 200, lambda: self.answered)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            try:
                body = await self.service.key_answer_or_none(scope)
            except ApiError as error:
                self.service.metrics.record_request(KEY_ROUTE, error.status)
                await api_error_response(error)(scope, receive, send)
                return
            except Exception as exc:  # a bug: the 500 every route gives, and the traceback
                self.service.metrics.record_request(KEY_ROUTE, 500)
                await unexpected_error_response(exc)(scope, receive, send)
                raise
            if body is not None:
                self.answered += 1
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-length", b"%d" % len(body)),
                            (b"content-type", b"application/json"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.counted(scope, receive, send)


class CountedRequests:
    """An ASGI app that counts each HTTP request it passes on, by the template of the route
    Starlette matched (`OTHER_ROUTE` when none did) and the status answered."""

    def __init__(self, app: ASGIApp, record: Callable[[str, int], None]) -> None:
        self.app, self.record = app, record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # unless a response starts

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            route = scope.get("route")
            self.record(OTHER_ROUTE if route is None else _template(route.path), status)


@functools.cache
def _template(path: str) -> str:
    """A route's path as a label: `{key:text}` as `{key}`."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


class _KeyLookup:
    """The key route as a plain ASGI endpoint (Starlette calls it without wrapping)."""

    def __init__(self, service: QueryService) -> None:
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.service.key_response(scope)
        await response(scope, receive, send)


def serde_name(serde: Any) -> str:
    return str(getattr(serde, "name", type(serde).__name__))


_STORE_FIELDS: dict[str, tuple[str, ...]] = {
    "window": ("window_size_ms", "retention_ms"),
    "session": ("retention_ms",),
    "versioned_key_value": ("history_retention_ms",),
}
"""What a store's description adds for each type of store that has more to say."""


def store_json(spec: StoreSpec) -> dict[str, Any]:
    """What a client needs to query a store: its kind, partitions and key and value types."""
    described: dict[str, Any] = {
        "type": spec.store_type,
        "partitions": spec.partitions,
        "key_serde": serde_name(spec.key_serde),
        "value_serde": serde_name(spec.value_serde),
    }
    described["partitioner"] = (
        "default" if follows_kafka_default(spec.partitions, spec.partitioner) else "custom"
    )
    for name in _STORE_FIELDS.get(spec.store_type, ()):
        described[name] = getattr(spec, name)
    return described


def _flag(body: dict[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{field!r} must be true or false")
    return value


def _acceptable_lag(value: Any) -> int | None:
    """A query body's `acceptable_lag`: offsets a standby may be behind; `None` (or null)
    reads running actives only."""
    if value is None:
        return None
    number = jsonin.integer(value)
    if number is None or not 0 <= number <= INT64_MAX:
        raise BadRequest(
            f"'acceptable_lag' must be a whole number of offsets from 0 to {INT64_MAX}, or "
            f"null (running actives only); got {json.dumps(value)[:40]}"
        )
    return number


def _kept(earlier: tuple[str, str] | None, later: tuple[str, str]) -> tuple[str, str]:
    """The key route's failure to report after `later`: the first store failure, which
    says more than that the next replica was too far behind, else the latest."""
    return earlier if earlier is not None and earlier[0] == _STORE_FAILED else later


def _key_query(spec: StoreSpec, read: KeyRead, key: Any, asked: KeyParams) -> Query[Any]:
    """The query a key request asks: the key's current value, or with `as_of` the version
    valid then (a 400 on a store without versions)."""
    if asked.as_of is None:
        return read.query(key)
    if read.at is None:
        raise BadRequest(
            f"'as_of' reads a versioned store; store {spec.name!r} is a {spec.store_type} store"
        )
    return read.at(key, asked.as_of)


_QUERY_FIELDS = frozenset(
    {
        "store", "query", "partitions", "bound", "require_active", "execution_info",
        "acceptable_lag", "scope", "max_rows", "merge", "limit", "cursor",
    }
)  # fmt: skip
"""The fields of a `POST /v1/query` body."""


def _refuse_unknown_fields(body: dict[str, Any], known: frozenset[str]) -> None:
    """`BadRequest` for a field of `body` not in `known`, naming the one meant where one is
    close: a misspelt `"bound"` would otherwise be ignored, and the answer not bounded."""
    unknown = sorted(set(body) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        meant = f" (did you mean {close[0]!r}?)" if close else ""
        raise BadRequest(
            f"unknown field {unknown[0]!r} in the request body{meant}; known: {sorted(known)}"
        )


def _cursor_text(value: Any) -> str | None:
    """A page's `cursor`: the `next` of the previous page; null or empty for the first."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    raise BadRequest("'cursor' must be the 'next' string of a previous page")


def _partitions(spec: StoreSpec, value: Any) -> list[int] | None:
    """The requested partitions, each in range: the answer never has more entries than the
    store has partitions, however long the list."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest("'partitions' must be a list of partition numbers")
    numbers = []
    for item in value:
        number = jsonin.integer(item)
        if number is None:
            raise BadRequest("'partitions' must be a list of partition numbers")
        if not 0 <= number < spec.partitions:
            raise BadRequest(
                f"partition {number} is out of range: store {spec.name!r} has partitions "
                f"0-{spec.partitions - 1}"
            )
        numbers.append(number)
    return numbers


class QueryService:
    """Handlers bound to one application; `asgi()` builds the Starlette app.

    `token`, when given, is required as `Authorization: Bearer <token>` on every data route;
    an empty token is refused, as it would let anyone in.
    """

    def __init__(
        self,
        app: Application,
        token: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        max_rows: int = DEFAULT_MAX_ROWS,
        range_limits: RangeLimits | None = None,
        forward_timeout: float = 10.0,
        peer_tls: ssl.SSLContext | None = None,
        change_streams: StreamSettings | None = None,
    ) -> None:
        """`peer_tls`: the other instances serve TLS; forwarded requests verify them with
        this context. `change_streams`: how `/v1/stores/{store}/changes` waits for a
        partition's new host and pings idle streams."""
        if token is not None and not token.strip():
            raise ValueError("the bearer token is empty: give a real token, or none")
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.app = app
        self.token = token
        self.max_body = max_body
        self.max_rows = max_rows
        self.codecs = Codecs(app.plugins)
        self.replicas = ReplicaChoice(app)
        self.forwarder = Forwarder(timeout=forward_timeout, tls=peer_tls)
        self.streams = dataclasses.replace(
            change_streams or StreamSettings(), scheme="http" if peer_tls is None else "https"
        )
        self._peer_tls = peer_tls
        self._peer_streams: httpx.AsyncClient | None = None
        self._open_streams: weakref.WeakSet[ChangeStream] = weakref.WeakSet()
        """The change streams being served (a finished one is collected)."""
        self._closing = False
        self.metrics = ServiceMetrics(app, lambda: self.forwarder.sent)
        self.runner = QueryRunner(
            app,
            self.codecs,
            self.replicas,
            self.forwarder,
            self.metrics.query,
            self.metrics.failed_while_read,
        )
        limits = range_limits or RangeLimits()
        self._ranges, self._forwarded_ranges = Gate(limits), Gate(limits)
        self._named_host = (app.host_info, json_bytes(str(app.host_info)))

    # -- plumbing ---------------------------------------------------------------------------

    def _spec(self, name: str) -> StoreSpec:
        spec = self.app.stores.get(name)
        if spec is None:
            raise self._unknown_store(name)
        return spec

    def _unknown_store(self, name: str) -> ApiError:
        return ApiError(
            404, "unknown_store", f"no store named {name!r}; stores: {sorted(self.app.stores)}"
        )

    def _misnamed_store(self, scope: Scope, name: str) -> ApiError:
        """The answer to a path naming store `name` through an encoded `/` (`raw_paths`):
        the token checked first, as on every route."""
        if self.token is not None:
            self._check_token_in(Headers(scope=scope))
        return self._unknown_store(name)

    def _check_token(self, request: Request) -> None:
        if self.token is not None:
            self._check_token_in(request.headers)

    def _check_token_in(self, headers: Headers) -> None:
        assert self.token is not None
        header = headers.get("authorization")
        if header is None:
            raise ApiError(
                401,
                "unauthorized",
                "an 'Authorization: Bearer <token>' header is required",
                {"WWW-Authenticate": _CHALLENGE},
            )
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer":
            raise ApiError(
                401,
                "unauthorized",
                f"the Authorization header must use the Bearer scheme "
                f"('Authorization: Bearer <token>'), not {scheme[:20]!r}",
                {"WWW-Authenticate": _CHALLENGE},  # no Bearer credentials: no error code
            )
        if not hmac.compare_digest(supplied.encode(), self.token.encode()):
            raise ApiError(
                401,
                "unauthorized",
                "the bearer token is wrong",
                {"WWW-Authenticate": _CHALLENGE + ', error="invalid_token"'},
            )

    async def _json_body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        # digits that are not a whole number up to max_body are more than it
        if declared and declared.isdigit() and whole_number(declared, self.max_body) is None:
            raise ApiError(413, "body_too_large", f"request body over {self.max_body} bytes")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body:
                raise ApiError(413, "body_too_large", f"request body over {self.max_body} bytes")
        try:
            return jsonin.loads(body)
        except jsonin.JsonInputError as exc:
            raise ApiError(
                400, "malformed_json", f"the body is not JSON the service accepts: {exc}"
            ) from exc

    def _guard(self, call: Callable[[], T]) -> T:
        """`call()`, its exceptions turned into API errors where the API has one."""
        try:
            return call()
        except Exception as exc:
            mapped = api_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    # -- routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """Alive and answering (`ok`), answering from a cluster it has lost contact with
        (`degraded`, still 200: restarting the process would not bring the broker back), or
        not answering (503)."""
        state = self.app.state
        contact = self.app.cluster_contact()
        body: dict[str, Any] = {"status": "unavailable", "state": state.name}
        if state.is_queryable:
            body["status"] = "degraded" if contact is not None and contact.lost else "ok"
        if contact is not None:
            body["broker_silence_s"] = round(contact.silence_s, 1)
        return JSONResponse(body, 200 if state.is_queryable else 503)

    async def ready(self, request: Request) -> Response:
        """200 only while the application runs and is in contact with its cluster."""
        state = self.app.state
        contact = self.app.cluster_contact()
        reason = None
        if state is not AppState.RUNNING:
            reason = f"the application is {state.name}, not RUNNING"
        elif self.app.leaving:
            reason = (
                "the instance is stopping: no other instance takes its partitions over"
                if self.app.single_instance
                else "the instance is leaving its cluster: it answers still while the other "
                "instances take its partitions over, then stops"
            )
        elif contact is not None and contact.lost:
            reason = (
                f"no contact with Kafka for {contact.silence_s:.1f} s (liveness timeout "
                f"{contact.limit_s:g} s): its actives are cut off, and instances that still "
                "reach Kafka take its partitions over"
            )
        if reason is None:
            return JSONResponse({"ready": True, "state": state.name})
        return JSONResponse({"ready": False, "state": state.name, "reason": reason}, 503)

    async def query(self, request: Request) -> Response:
        self._check_token(request)
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "bad_request", "the body must be a JSON object")
        if not isinstance(body.get("store"), str):
            raise ApiError(400, "bad_request", "'store' (a store name) is required")
        spec = self._spec(body["store"])
        forwarded = FORWARDED_HEADER in request.headers
        options = self._guard(lambda: self._query_options(spec, body, forwarded, request))
        try:
            if keyed(options.query):  # one key's partition: never held back by ranges
                answer = await self.runner.answer(options)
            else:
                async with (self._forwarded_ranges if forwarded else self._ranges).admitted():
                    answer = await self.runner.answer(options)
        except Exception as exc:
            mapped = api_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        return Response(answer, media_type="application/json")

    def _query_options(
        self, spec: StoreSpec, body: dict[str, Any], forwarded: bool, request: Request
    ) -> QueryOptions:
        """A `POST /v1/query` body, read and checked (`BadRequest` says what is wrong)."""
        _refuse_unknown_fields(body, _QUERY_FIELDS)
        scope = body.get("scope", "cluster")
        if scope not in ("cluster", "local"):
            raise BadRequest("'scope' must be 'cluster' or 'local'")
        merge = _flag(body, "merge")
        if not merge and ("cursor" in body or "limit" in body):
            raise BadRequest("'cursor' and 'limit' page a merged answer: add \"merge\": true")
        max_rows = body.get("max_rows")
        if max_rows is None:
            max_rows = self.max_rows
        elif (number := jsonin.integer(max_rows)) is None or not 1 <= number <= self.max_rows:
            raise BadRequest(f"'max_rows' must be an integer from 1 to {self.max_rows}")
        else:
            max_rows = number
        query = self.codecs.decode(spec, body.get("query"))
        return QueryOptions(
            spec=spec,
            query=query,
            query_json=body["query"],
            partitions=_partitions(spec, body.get("partitions")),
            bound=bound_from_json(body.get("bound")),
            require_active=_flag(body, "require_active"),
            execution_info=_flag(body, "execution_info"),
            acceptable_lag=_acceptable_lag(body.get("acceptable_lag")),
            local_only=forwarded or scope == "local",
            max_rows=max_rows,
            merge=merge,
            limit=page_limit(body.get("limit")) if merge else 0,
            cursor=_cursor_text(body.get("cursor")),
            authorization=request.headers.get("authorization"),
        )

    async def key_response(self, scope: Scope) -> Response:
        """`GET /v1/stores/{store}/keys/{key}` through Starlette's routing: a request with a
        token to check, a `HEAD`, or one `KeyRouteFirst` left to it for its error."""
        headers = Headers(scope=scope)
        if self.token is not None:
            self._check_token_in(headers)
        params = scope["path_params"]
        spec, read = self._key_read(params["store"])
        key = self._guard(lambda: key_from_path(spec, params["key"]))
        asked = self._guard(lambda: key_params(scope))
        query = self._guard(lambda: _key_query(spec, read, key, asked))
        if asked.lag is None and (body := self._local_key_body(spec, read, query, None)):
            return Response(body, media_type="application/json")
        forwarded = FORWARDED_HEADER in headers
        body = await self._key_elsewhere(
            spec, read, key, query, asked, forwarded, scope, headers.get("authorization")
        )
        return Response(body, media_type="application/json")

    async def key_answer_or_none(self, scope: Scope) -> bytes | None:
        """The body of a `GET` of the key route when it is a 200, answered here or
        forwarded; None for any other path, or when a token must be checked (the routed app
        answers those). `ApiError` for an error answer: an unknown store, a malformed key or
        parameter, no replica of the key's partition answering."""
        path = scope["path"]
        if self.token is not None or not path.startswith(_KEY_ROUTE_PREFIX):
            return None
        store, found, key_text = path[len(_KEY_ROUTE_PREFIX) :].partition("/keys/")
        if not found or not store or "/" in store:
            return None
        if misnamed_store(scope) is not None:
            return None  # the routed app refuses it
        spec, read = self._key_read(store)
        key = self._guard(lambda: key_from_path(spec, key_text))
        asked = self._guard(lambda: key_params(scope)) if scope.get("query_string") else NONE_ASKED
        query = (
            read.query(key)
            if asked is NONE_ASKED
            else self._guard(lambda: _key_query(spec, read, key, asked))
        )
        if asked.lag is None and (body := self._local_key_body(spec, read, query, None)):
            return body
        forwarded = any(name == _FORWARDED for name, _ in scope["headers"])
        return await self._key_elsewhere(spec, read, key, query, asked, forwarded, scope, None)

    async def _key_elsewhere(
        self,
        spec: StoreSpec,
        read: KeyRead,
        key: Any,
        query: Query[Any],
        asked: KeyParams,
        forwarded: bool,
        scope: Scope,
        authorization: str | None,
    ) -> bytes:
        """The key route's body from a replica other than this instance's running active: a
        local standby or restoring replica `lag` accepts, or another instance's (one hop);
        `ApiError` 503 with the last failure when none answers (the first store failure
        when one failed to read the key: the next replica too far behind says less)."""
        partition = spec.partition_of(key, spec.key_serde.serialize(key))
        lag = asked.lag
        failure: tuple[str, str] | None = None
        for replica in self.replicas.candidates(spec.name, partition, lag):
            if replica.local:
                if replica.state == RUNNING and lag is None:
                    continue  # asked already
                local: Replica | None = replica
                if replica.state != RUNNING:
                    # As it is now, not as the table (up to `max_age` old) has it: a
                    # standby rebuilt since holds nothing, and would answer absent.
                    now = self.replicas.here_now(spec.name, (partition,))[partition]
                    local = now if now is not None and now.within(lag) else None
                try:
                    body = None if local is None else self._local_key_body(spec, read, query, local)
                except ApiError as exc:
                    if exc.code != _STORE_FAILED:
                        raise
                    failure = _kept(failure, (exc.code, exc.message))  # another may read it
                    continue
                if body is not None:
                    return body
                failure = _kept(
                    failure, ("not_active", f"the replica on {replica.host} may not answer now")
                )
                continue
            if forwarded:  # one hop: this instance's replica or nothing
                continue
            path = (scope.get("raw_path") or quote(scope["path"]).encode()) + asked.query_string()
            answer = await self.forwarder.get(replica.host, path.decode("latin-1"), authorization)
            if isinstance(answer, Forwarded):
                return answer.body
            if answer.unreachable:
                self.replicas.invalidate()
            failure = _kept(failure, (failure_reason_of(answer.code).name.lower(), answer.message))
        if failure is None:
            reason, message = self.replicas.why_none(spec.name, partition, lag, forwarded)
            failure = (reason.name.lower(), message)
        if not forwarded:  # counted once, where the caller asked
            self.metrics.unanswered(spec.name, type(query), failure_reason_of(failure[0]))
        raise ApiError(503, *failure)

    def _key_read(self, store: str) -> tuple[StoreSpec, KeyRead]:
        """The store and how the key route reads it; a 400 for a store without key route."""
        spec = self._spec(store)
        read = KEY_READS.get(spec.store_type)
        if read is None:
            asked = ASKED_INSTEAD.get(spec.store_type, "a query")
            raise ApiError(
                400,
                "not_a_key_value_store",
                f"store {spec.name!r} is a {spec.store_type} store: look its keys up with "
                f"{asked} (POST /v1/query)",
            )
        return spec, read

    def _host(self) -> bytes:
        """This instance's `application_server` as JSON, made again when it was advertised
        elsewhere (`Application.advertise`)."""
        host_info, text = self._named_host  # one tuple: read and replaced whole
        if host_info is not self.app.host_info:
            host_info = self.app.host_info
            text = json_bytes(str(host_info))
            self._named_host = (host_info, text)
        return text

    def _local_key_body(
        self, spec: StoreSpec, read: KeyRead, query: Query[Any], replica: Replica | None
    ) -> bytes | None:
        """The key route's JSON body answered by this instance's replica of the key's
        partition: its running active (`replica` None or running), or the standby or
        restoring `replica` a request's `acceptable_lag` accepts. None when this instance
        has no such replica; an error that is this replica's own is an `ApiError` 503."""
        request = StateQueryRequest.in_store(spec.name).with_query(query)
        if replica is None or replica.state == RUNNING:
            request = request.require_active()
        try:
            result = self.metrics.query(request, asked_elsewhere_if_refused=True)
        except Exception as exc:
            mapped = api_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        answers = result.partition_results  # the key's partition: NOT_PRESENT if elsewhere
        if not answers:
            return None
        ((partition, answer),) = answers.items()
        if answer.is_failure:
            if answer.failure_reason in (FailureReason.NOT_ACTIVE, FailureReason.NOT_PRESENT):
                return None
            raise ApiError(503, answer.failure_reason.name.lower(), answer.failure_message)
        members = read.members(answer.result)
        position = position_json_bytes(result.position)  # cached: it changes once a batch
        if replica is None or replica.state == RUNNING:
            return ANSWER % (members, partition, position, self._host(), _RUNNING, _NO_LAG)
        return ANSWER % (
            members, partition, position, json_bytes(replica.host), json_bytes(replica.state),
            json_bytes(replica.lag),
        )  # fmt: skip

    async def changes(self, request: Request) -> Response:
        """`GET /v1/stores/{store}/changes`: the store's committed changes as Server-Sent
        Events, merged from every partition's host (`change_stream`)."""
        self._check_token(request)
        spec = self._spec(request.path_params["store"])
        wanted = self._guard(
            lambda: change_request(self.app.application_id, spec, request, self.replicas)
        )
        stream = ChangeStream(self.app, self.replicas, self._peers(), wanted, self.streams)
        self._open_streams.add(stream)
        if self._closing:  # accepted just before the server began to shut down
            stream.shutdown.set()
        return EventSourceResponse(
            stream.events(),
            ping=self.streams.ping_interval,
            # sse-starlette sets it when it sees uvicorn stop on a signal, then waits
            shutdown_event=stream.shutdown,
            shutdown_grace_period=_FINAL_EVENT_GRACE,
        )

    def end_change_streams(self) -> None:
        """The server is shutting down: every open change stream sends its final event
        (`unavailable`, with the cursor to resume from) and ends. On the server's loop."""
        self._closing = True
        for stream in list(self._open_streams):
            stream.shutdown.set()

    def _peers(self) -> httpx.AsyncClient:
        """The client that opens change streams on other instances (made on first use, in
        the server's event loop): no read timeout beyond the pings' silence."""
        if self._peer_streams is None:
            silence = 3 * self.streams.ping_interval
            self._peer_streams = httpx.AsyncClient(
                timeout=httpx.Timeout(10.0, read=silence),
                verify=self._peer_tls if self._peer_tls is not None else True,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=16),
            )
        return self._peer_streams

    async def stores(self, request: Request) -> Response:
        self._check_token(request)
        return JSONResponse({name: store_json(spec) for name, spec in self.app.stores.items()})

    async def metadata(self, request: Request) -> Response:
        self._check_token(request)
        return JSONResponse(
            self._guard(lambda: [_metadata_json(self.app, m) for m in self.app.all_metadata()])
        )

    async def store_metadata(self, request: Request) -> Response:
        self._check_token(request)
        spec = self._spec(request.path_params["store"])
        return JSONResponse(
            self._guard(
                lambda: [
                    _metadata_json(self.app, m) for m in self.app.all_metadata_for_store(spec.name)
                ]
            )
        )

    async def key_metadata(self, request: Request) -> Response:
        self._check_token(request)
        spec = self._spec(request.path_params["store"])
        return JSONResponse(
            self._guard(lambda: self._where(spec, key_from_path(spec, request.path_params["key"])))
        )

    async def key_metadata_json(self, request: Request) -> Response:
        """`POST /v1/metadata/key` with `{"store", "key"}`: the key as JSON, no path encoding."""
        self._check_token(request)
        body = await self._json_body(request)
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("store"), str)
            or "key" not in body
        ):
            raise ApiError(400, "bad_request", 'the body must be {"store": ..., "key": ...}')
        spec = self._spec(body["store"])
        return JSONResponse(
            self._guard(lambda: self._where(spec, key_from_json(spec, body["key"])))
        )

    def _where(self, spec: StoreSpec, key: Any) -> dict[str, Any]:
        found = self.app.query_metadata_for_key(spec.name, key)
        assert found is not None  # the store exists
        active = found.active_host
        return {
            "active": None if active.port < 0 else f"{active.host}:{active.port}",
            "standbys": sorted(f"{h.host}:{h.port}" for h in found.standby_hosts),
            "partition": found.partition,
        }

    async def lags(self, request: Request) -> Response:
        self._check_token(request)

        def run() -> dict[str, Any]:
            return {
                store: {
                    str(p): {
                        "current": lag.current_offset_position,
                        "end": lag.end_offset_position,
                        "lag": lag.offset_lag,
                        "rebuilt": lag.rebuilt,
                    }
                    for p, lag in partitions.items()
                }
                for store, partitions in self.app.all_local_store_partition_lags().items()
            }

        return JSONResponse(self._guard(run))

    async def cluster(self, request: Request) -> Response:
        self._check_token(request)
        return JSONResponse(
            self._guard(lambda: [_status_json(s) for s in self.app.cluster_status()])
        )

    async def partitions(self, request: Request) -> Response:
        self._check_token(request)
        return JSONResponse(
            self._guard(
                lambda: [
                    {
                        "store": store,
                        "partition": p,
                        "role": role.state,
                        "position": position_to_json(pos),
                    }
                    for store, p, role, pos in self.app.local_partitions()
                ]
            )
        )

    async def metrics_document(self, request: Request) -> Response:
        """Prometheus' text format: query counts and durations, requests, lags, live
        instances and Kafka's silence (`iqstate_http.metrics`)."""
        self._check_token(request)
        body = await run_in_threadpool(self.metrics.document)
        return Response(body, media_type=PROMETHEUS_TEXT)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(
            openapi_document(
                self.app.stores,
                self.codecs,
                secured=self.token is not None,
                max_rows=self.max_rows,
            )
        )

    def asgi(self) -> ASGIApp:
        """The service as an ASGI app: the key route's plain answers first, then Starlette."""
        return KeyRouteFirst(self, self.routed_asgi())

    def routed_asgi(self) -> Starlette:
        """Every route, through Starlette's routing, middleware and exception handlers."""
        routes = [  # matched in order: the busiest routes first
            Route("/v1/stores/{store}/keys/{key:text}", _KeyLookup(self), methods=["GET", "HEAD"]),
            Route("/v1/query", self.query, methods=["POST"]),
            Route("/v1/health", self.health),
            Route("/v1/ready", self.ready),
            Route("/v1/stores", self.stores),
            Route("/v1/stores/{store}/changes", self.changes),
            Route("/v1/metadata", self.metadata),
            Route("/v1/metadata/stores/{store}", self.store_metadata),
            Route("/v1/metadata/stores/{store}/keys/{key:text}", self.key_metadata),
            Route("/v1/metadata/key", self.key_metadata_json, methods=["POST"]),
            Route("/v1/lags", self.lags),
            Route("/v1/cluster", self.cluster),
            Route("/v1/partitions", self.partitions),
            Route("/", self.page),
            Route("/openapi.json", self.openapi),
            Route("/metrics", self.metrics_document),
        ]
        return Starlette(
            routes=routes,
            middleware=[Middleware(EncodedSlashStores, refusal=self._misnamed_store)],
            exception_handlers=dict(HANDLERS),
            lifespan=self._lifespan,
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.forwarder.aclose()
        if self._peer_streams is not None:
            await self._peer_streams.aclose()
