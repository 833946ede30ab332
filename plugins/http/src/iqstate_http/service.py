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

import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.runtime.metadata import InstanceStatus, StreamsMetadata
from iqstate.runtime.spec import KeyValueStoreSpec, StoreSpec, WindowStoreSpec
from iqstate_http import jsonin
from iqstate_http.codecs import (
    BadRequest,
    Codecs,
    bound_from_json,
    json_bytes,
    key_from_json,
    key_from_path,
    position_json_bytes,
    position_to_json,
    to_json,
)
from iqstate_http.errors import HANDLERS, ApiError, api_error
from iqstate_http.limits import DEFAULT_MAX_BODY
from iqstate_http.openapi import openapi_document

PAGE = (Path(__file__).parent / "page.html").read_text(encoding="utf-8")
_CHALLENGE = 'Bearer realm="iqstate"'
T = TypeVar("T")


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


_KEY_ROUTE_PREFIX = "/v1/stores/"


class KeyRouteFirst:
    """The service's ASGI app: a `GET` of the key route (the busiest) answered before
    Starlette's middleware, routing and `Response` (measured in bench/http_service.py);
    every other request, and every key request whose answer is not a plain 200 (an error, a
    token to check), goes to the routed app, which answers it as every route answers."""

    def __init__(self, service: QueryService, routed: ASGIApp) -> None:
        self.service, self.routed = service, routed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            body = self.service.key_body_or_none(scope["path"])
            if body is not None:
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
        await self.routed(scope, receive, send)


class _KeyLookup:
    """The key route as a plain ASGI endpoint (Starlette calls it without wrapping)."""

    def __init__(self, service: QueryService) -> None:
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.service.key_response(scope)(scope, receive, send)


def serde_name(serde: Any) -> str:
    return str(getattr(serde, "name", type(serde).__name__))


def store_json(spec: StoreSpec) -> dict[str, Any]:
    """What a client needs to query a store: its kind, partitions and key and value types."""
    described: dict[str, Any] = {
        "type": spec.store_type,
        "partitions": spec.partitions,
        "key_serde": serde_name(spec.key_serde),
        "value_serde": serde_name(spec.value_serde),
    }
    if isinstance(spec, WindowStoreSpec):
        described["window_size_ms"] = spec.window_size_ms
        described["retention_ms"] = spec.retention_ms
    return described


def _flag(body: dict[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{field!r} must be true or false")
    return value


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
        self, app: Application, token: str | None = None, max_body: int = DEFAULT_MAX_BODY
    ) -> None:
        if token is not None and not token.strip():
            raise ValueError("the bearer token is empty: give a real token, or none")
        self.app = app
        self.token = token
        self.max_body = max_body
        self.codecs = Codecs(app.plugins)

    # -- plumbing ---------------------------------------------------------------------------

    def _spec(self, name: str) -> StoreSpec:
        spec = self.app.stores.get(name)
        if spec is None:
            raise ApiError(
                404, "unknown_store", f"no store named {name!r}; stores: {sorted(self.app.stores)}"
            )
        return spec

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
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            supplied.encode(), self.token.encode()
        ):
            raise ApiError(
                401,
                "unauthorized",
                "the bearer token is wrong",
                {"WWW-Authenticate": _CHALLENGE + ', error="invalid_token"'},
            )

    async def _json_body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
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

    def _result_json(self, query: Any, result: Any) -> dict[str, Any]:
        partitions: dict[str, Any] = {}
        for partition, partition_result in sorted(result.partition_results.items()):
            entry: dict[str, Any] = {"position": position_to_json(partition_result.position)}
            if partition_result.is_success:
                entry["ok"] = True
                entry["value"] = self.codecs.encode(query, partition_result)
            else:
                entry["ok"] = False
                entry["failure"] = partition_result.failure_reason.name
                entry["message"] = partition_result.failure_message
            if partition_result.execution_info:
                entry["execution_info"] = partition_result.execution_info
            partitions[str(partition)] = entry
        return {"partitions": partitions, "position": position_to_json(result.position)}

    # -- routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        state = self.app.state
        status = 200 if state.is_queryable else 503
        return JSONResponse(
            {"status": "ok" if status == 200 else "unavailable", "state": state.name}, status
        )

    async def query(self, request: Request) -> Response:
        self._check_token(request)
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "bad_request", "the body must be a JSON object")
        if not isinstance(body.get("store"), str):
            raise ApiError(400, "bad_request", "'store' (a store name) is required")
        spec = self._spec(body["store"])

        def run() -> bytes:
            query = self.codecs.decode(spec, body.get("query"))
            request_ = StateQueryRequest.in_store(spec.name).with_query(query)
            partitions = _partitions(spec, body.get("partitions"))
            if partitions is not None:
                request_ = request_.with_partitions(partitions)
            request_ = request_.with_position_bound(bound_from_json(body.get("bound")))
            if _flag(body, "require_active"):
                request_ = request_.require_active()
            if _flag(body, "execution_info"):
                request_ = request_.enable_execution_info()
            result = self.app.query(request_)
            # Encoding reads the results' iterators: store work too, so it stays here.
            return json_bytes({"store": spec.name, **self._result_json(query, result)})

        answer = await run_in_threadpool(self._guard, run)
        return Response(answer, media_type="application/json")

    def key_response(self, scope: Scope) -> Response:
        """`GET /v1/stores/{store}/keys/{key}` through Starlette's routing: a request with a
        token to check, a `HEAD`, or one `KeyRouteFirst` left to it (errors raise as in every
        other route)."""
        if self.token is not None:
            self._check_token_in(Headers(scope=scope))
        params = scope["path_params"]
        return Response(
            self._key_body(params["store"], params["key"]), media_type="application/json"
        )

    def key_body_or_none(self, path: str) -> bytes | None:
        """The body of a `GET` of the key route at `path` when it is a plain 200 answer;
        None for any other path, when a token must be checked, or when the answer is an
        error (the routed app then answers the request, with the error's response)."""
        if self.token is not None or not path.startswith(_KEY_ROUTE_PREFIX):
            return None
        store, found, key = path[len(_KEY_ROUTE_PREFIX) :].partition("/keys/")
        if not found or not store or "/" in store:
            return None
        try:
            return self._key_body(store, key)
        except Exception:
            return None

    def _key_body(self, store: str, key_text: str) -> bytes:
        """The key route's JSON body: `{"value", "partition", "position"}`."""
        spec = self._spec(store)
        if not isinstance(spec, KeyValueStoreSpec):
            raise ApiError(
                400,
                "not_a_key_value_store",
                f"store {spec.name!r} is a {spec.store_type} store: look its keys up with a "
                "'window_key' query (POST /v1/query)",
            )
        try:
            key = key_from_path(spec, key_text)
            result = self.app.query(
                StateQueryRequest.in_store(spec.name).with_query(KeyQuery.with_key(key))
            )
        except Exception as exc:
            mapped = api_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        answers = result.partition_results  # only the key's partition, if hosted here
        if answers:
            ((partition, answer),) = answers.items()
        else:
            partition, answer = spec.partition_of(key, spec.key_serde.serialize(key)), None
        if answer is not None and answer.is_failure:
            raise ApiError(503, answer.failure_reason.name.lower(), answer.failure_message)
        # The position's JSON is cached.
        value = b"null" if answer is None else json_bytes(to_json(answer.result))
        return b'{"value":%b,"partition":%d,"position":%b}' % (
            value,
            partition,
            position_json_bytes(result.position),
        )

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

    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(
            openapi_document(self.app.stores, self.codecs, secured=self.token is not None)
        )

    def asgi(self) -> ASGIApp:
        """The service as an ASGI app: the key route's plain answers first, then Starlette."""
        return KeyRouteFirst(self, self.routed_asgi())

    def routed_asgi(self) -> Starlette:
        """Every route, through Starlette's routing, middleware and exception handlers."""
        routes = [  # matched in order: the busiest routes first
            Route("/v1/stores/{store}/keys/{key:path}", _KeyLookup(self), methods=["GET", "HEAD"]),
            Route("/v1/query", self.query, methods=["POST"]),
            Route("/v1/health", self.health),
            Route("/v1/stores", self.stores),
            Route("/v1/metadata", self.metadata),
            Route("/v1/metadata/stores/{store}", self.store_metadata),
            Route("/v1/metadata/stores/{store}/keys/{key:path}", self.key_metadata),
            Route("/v1/metadata/key", self.key_metadata_json, methods=["POST"]),
            Route("/v1/lags", self.lags),
            Route("/v1/cluster", self.cluster),
            Route("/v1/partitions", self.partitions),
            Route("/", self.page),
            Route("/openapi.json", self.openapi),
        ]
        return Starlette(routes=routes, exception_handlers=dict(HANDLERS))
