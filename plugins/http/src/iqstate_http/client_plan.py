"""What `RemoteQueryClient` and `AsyncRemoteQueryClient` do, without doing any I/O (SPEC 8.3).

Each operation is a plan: a generator that yields the HTTP calls to make next (several
at once when they can run in parallel) and is sent their replies, until it returns its
answer. The synchronous client runs plans with a thread pool, the asyncio client with
`asyncio.gather`; the logic is written once, here.

The client keeps a view of the cluster: every instance with the partitions it hosts
(`/v1/metadata`), and every store's partitions, serdes and partitioner (`/v1/stores`),
read again when it is older than `metadata_max_age` or when an answer shows the layout
moved (`NOT_PRESENT`, `NOT_ACTIVE`, another instance answered, a connection failure). With
the view it computes a key's partition itself (for the default partitioner) and sends a
keyed query straight to the instance hosting the partition: one request in the steady
state. Any instance answers for the whole cluster (it forwards what it does not host), so
a stale view costs a hop, never a wrong answer.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from iqstate import (
    FailureReason,
    KeyQuery,
    KeyValueIterator,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    Query,
    QueryResult,
    RangeQuery,
    ResultOrder,
    StateQueryRequest,
    StateQueryResult,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    VersionedRecordIterator,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.errors import IqstateError, UnknownStateStoreError
from iqstate.plugins import default_registry
from iqstate.runtime.partitioner import PartitionFunction, partition_function
from iqstate.runtime.querying import keyed
from iqstate.serdes import Serde
from iqstate_http import jsonin
from iqstate_http.codecs import (
    BUILTIN_CODECS,
    STORE_QUERY_TYPES,
    failure_reason_of,
    path_segment,
    position_from_json,
    position_to_json,
)
from iqstate_http.limits import MAX_LIMIT

REFUSALS = (400, 401, 403, 404, 422)
"""Answers every instance would give (bad input, a wrong token or URL): a subscription
stops at them, where it waits out the others (an instance down or busy)."""


_DISCOVERY_REFUSALS = {
    401: ": the service wants a bearer token and was given none or another (the client's "
    "token= must be the service's)",
    403: ": the service refused the token (the client's token= must be the service's)",
    404: ": no iqstate service at this URL (its metadata route is not there)",
}
"""What a refused discovery request means, beside its status."""


class NoInstanceReached(ConnectionError):
    """No seed could be reached, or none could serve now (HTTP 5xx, 429...): unlike a
    refusal (a wrong token, a wrong URL), a subscription waits for one to come back."""


@dataclass(frozen=True)
class Call:
    """One HTTP request to make: method, absolute URL, JSON body."""

    method: str
    url: str
    json: Any = None


@dataclass(frozen=True)
class Wait:
    """Not a request: the plan waits `seconds` before its next calls (its reply is empty)."""

    seconds: float


@dataclass(frozen=True)
class Reply:
    """Its answer: the status and JSON body, or `error` (the exception's type name) when
    no answer came."""

    status: int = 0
    body: Any = None
    error: str | None = None
    retry_after: float | None = None

    @property
    def answered(self) -> bool:
        return self.error is None


Plan = Generator[list[Call | Wait], list[Reply], Any]
"""An operation: yields calls, is sent their replies, returns its answer."""

_PAGE_RETRIES = 30
"""How often a page an instance could not answer yet (busy with ranges, or a partition
between replicas: a failover) is asked again, each after the wait the instance asked for,
or half a second: about half a minute."""


def run_plan(plan: Plan, send: Callable[[list[Call | Wait]], list[Reply]]) -> Any:
    """Run `plan` to its answer, making its calls with `send`."""
    try:
        calls = next(plan)
        while True:
            calls = plan.send(send(calls))
    except StopIteration as done:
        return done.value


def _key_json(key: Any) -> Any:
    return base64.b64encode(key).decode("ascii") if isinstance(key, bytes) else key


def _bound_json(bound: Any) -> Any:
    return None if bound is None else _key_json(bound)


def _key_query_json(query: Any) -> dict[str, Any]:
    return {"type": "key", "key": _key_json(query.key), "skip_cache": query.is_skip_cache}


def _range_json(query: Any) -> dict[str, Any]:
    return {
        "type": "range",
        "lower": _bound_json(query.lower_bound),
        "upper": _bound_json(query.upper_bound),
        "order": query.result_order.value,
    }


def _window_key_json(query: Any) -> dict[str, Any]:
    return {"type": "window_key", "key": _key_json(query.key), "time_from": query.time_from,
            "time_to": query.time_to}  # fmt: skip


def _window_range_json(query: Any) -> dict[str, Any]:
    body = {"type": "window_range", "time_from": query.time_from, "time_to": query.time_to}
    if query.key is not None:
        body["key"] = _key_json(query.key)
    return body


def _timestamped_key_json(query: Any) -> dict[str, Any]:
    return {**_key_query_json(query), "type": "timestamped_key"}


def _timestamped_range_json(query: Any) -> dict[str, Any]:
    return {**_range_json(query), "type": "timestamped_range"}


def _versioned_key_json(query: Any) -> dict[str, Any]:
    return {"type": "versioned_key", "key": _key_json(query.key), "as_of": query.as_of_timestamp}


def _multi_versioned_key_json(query: Any) -> dict[str, Any]:
    return {"type": "multi_versioned_key", "key": _key_json(query.key),
            "from_time": query.from_timestamp, "to_time": query.to_timestamp,
            "ascending": query.ascending}  # fmt: skip


def _versioned_range_json(query: Any) -> dict[str, Any]:
    return {"type": "versioned_range", "lower": _bound_json(query.lower_bound),
            "upper": _bound_json(query.upper_bound), "as_of": query.as_of_timestamp}  # fmt: skip


_QUERY_JSON: dict[type[Any], Callable[[Any], dict[str, Any]]] = {
    KeyQuery: _key_query_json,
    RangeQuery: _range_json,
    WindowKeyQuery: _window_key_json,
    WindowRangeQuery: _window_range_json,
    TimestampedKeyQuery: _timestamped_key_json,
    TimestampedRangeQuery: _timestamped_range_json,
    VersionedKeyQuery: _versioned_key_json,
    MultiVersionedKeyQuery: _multi_versioned_key_json,
    VersionedRangeQuery: _versioned_range_json,
}
"""The JSON form of each built-in query type (the service's codecs read it back)."""


def _most_specific(table: dict[type[Any], Any], query: Query[Any]) -> Any:
    """The entry of `table` for the query's type, or its nearest base class's; None."""
    for kind in type(query).__mro__:
        if kind in table:
            return table[kind]
    return None


def query_json(query: Query[Any]) -> dict[str, Any]:
    """The JSON form of a built-in query."""
    write = _most_specific(_QUERY_JSON, query)
    if write is None:
        raise TypeError(f"RemoteQueryClient has no JSON form for {type(query).__name__}")
    body: dict[str, Any] = write(query)
    return body


def _pairs(value: Any) -> Any:
    return KeyValueIterator([tuple(pair) for pair in value])


def _windows(value: Any) -> Any:
    return KeyValueIterator([(Windowed(w["key"], w["start"], w["end"]), w["value"]) for w in value])


def _stamped(value: Any) -> ValueAndTimestamp[Any]:
    return ValueAndTimestamp(value["value"], value["timestamp"])


def _version(value: Any) -> VersionedRecord[Any]:
    return VersionedRecord(value["value"], value["timestamp"], value["valid_to"])


def _stamped_or_none(value: Any) -> Any:
    return None if value is None else _stamped(value)


def _version_or_none(value: Any) -> Any:
    return None if value is None else _version(value)


def _versions(value: Any) -> Any:
    return VersionedRecordIterator([_version(record) for record in value])


def _stamped_pairs(value: Any) -> Any:
    return KeyValueIterator([(key, _stamped(stamped)) for key, stamped in value])


def _versioned_pairs(value: Any) -> Any:
    return KeyValueIterator([(key, _version(record)) for key, record in value])


_RESULTS: dict[type[Any], Callable[[Any], Any]] = {
    RangeQuery: _pairs,
    WindowKeyQuery: _pairs,
    WindowRangeQuery: _windows,
    TimestampedKeyQuery: _stamped_or_none,
    TimestampedRangeQuery: _stamped_pairs,
    VersionedKeyQuery: _version_or_none,
    MultiVersionedKeyQuery: _versions,
    VersionedRangeQuery: _versioned_pairs,
}
"""How a result's JSON becomes the result `app.query` gives (a `key` result is its JSON)."""


_ROW_VALUES: dict[type[Any], Callable[[Any], Any]] = {
    RangeQuery: lambda value: value,
    TimestampedRangeQuery: _stamped,
    VersionedRangeQuery: _version,
}
"""The query types a merged page reads, and how a row's value JSON becomes what the query's
result holds."""


def _value(query: Query[Any], value: Any) -> Any:
    read = _most_specific(_RESULTS, query)
    return value if read is None else read(value)


_LAYOUT_MOVED = frozenset({FailureReason.NOT_PRESENT, FailureReason.NOT_ACTIVE})


def _url(scheme: str, instance: dict[str, Any]) -> str:
    return f"{scheme}://{instance['host']}:{instance['port']}"


def _error_message(reply: Reply) -> str:
    try:
        return str(reply.body["error"]["message"])
    except (TypeError, KeyError):
        return f"HTTP {reply.status}"


def _refusal(url: str, reply: Reply) -> Exception:
    """What a request an instance refused (a 4xx) raises, typed as `app.query` would raise
    it: an unknown store is an `UnknownStateStoreError`, anything else the request got
    wrong a `ValueError`. Neither is a `ConnectionError`: asking again cannot help."""
    message = f"{url} refused the request: {_error_message(reply)}"
    error = reply.body.get("error") if isinstance(reply.body, dict) else None
    if isinstance(error, dict) and error.get("code") == "unknown_store":
        return UnknownStateStoreError(message)
    return ValueError(message)


def _retry_after(reply: Reply) -> float:
    """The wait a 503 asked for (`Retry-After`, as its JSON says nothing of it), or 0.5 s."""
    return reply.retry_after if reply.retry_after is not None else 0.5


def _partitions_of(key_partition: int | None, store: StoreInfo | None) -> list[int]:
    """The partitions an all-partition request's failure falls on: the key's where it is
    known, else every partition of the store where that is known."""
    if key_partition is not None:
        return [key_partition]
    return [] if store is None else list(range(store.partitions))


def _unknown_query_type(
    store: StoreInfo, request: StateQueryRequest[Any], type_name: str, key_partition: int | None
) -> StateQueryResult[Any] | None:
    """The answer `app.query` gives a query type the store's type does not answer: each
    partition asked fails with `UNKNOWN_QUERY_TYPE`, naming the query types it answers
    (None when it answers this one, or the request names a partition the store lacks: the
    service says why)."""
    served = STORE_QUERY_TYPES.get(store.store_type or "")
    if served is None or type_name in served or type_name not in BUILTIN_CODECS:
        return None  # a plugin's query type: the store may answer it
    named = request.partition_set
    if named is not None and not all(0 <= number < store.partitions for number in named):
        return None
    asked = sorted(named) if named is not None else _partitions_of(key_partition, store)
    answered = ", ".join(sorted(BUILTIN_CODECS[name].query_type.__name__ for name in served))
    message = (
        f"This store ({store.store_type} store {store.name!r}) doesn't know how to execute "
        f"the given query ({request.query!r}). It answers {answered}."
    )
    return StateQueryResult(
        {number: QueryResult.for_failure(FailureReason.UNKNOWN_QUERY_TYPE, message)
         for number in asked}
    )  # fmt: skip


def _unreachable(url: str, reply: Reply) -> QueryResult[Any]:
    return QueryResult.for_failure(
        FailureReason.NOT_PRESENT, f"instance {url} could not be reached: {reply.error}"
    )


@dataclass
class StoreInfo:
    """What the client knows of a store: partitions, and the key serde when it can
    compute a key's partition itself (Kafka's default partitioning, a serde it has)."""

    name: str
    partitions: int
    key_serde_name: str
    key_serde: Serde[Any] | None
    store_type: str | None = None
    """`key_value`, `window`, ... (`None`: an instance that does not say)."""
    partition_function: PartitionFunction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The runtime's own rule (iqstate.runtime.partitioner): a store the service says
        # follows Kafka's default partitioning has no partitioner the client would need.
        self.partition_function = partition_function(self.name, self.partitions, None)

    def partition_of(self, key: Any) -> int | None:
        """The key's partition, or None when the service must say (a custom partitioner,
        a serde the client lacks, a key the serde refuses)."""
        if self.key_serde is None:
            return None
        try:
            key_bytes = self.key_serde.serialize(key)
        except Exception:  # a key the serde refuses: the service says why
            return None
        return self.partition_function(key, key_bytes)

    def key_path(self, key: Any) -> str | None:
        """The key as the key route's path segment; None when it has no path form."""
        name = self.key_serde_name
        if name == "string" and isinstance(key, str) and key:
            text = key
        elif name == "int64" and isinstance(key, int) and not isinstance(key, bool):
            text = str(key)
        elif name == "float64" and isinstance(key, float) and math.isfinite(key):
            text = json.dumps(key)
        elif name == "bytes" and isinstance(key, bytes):
            text = base64.b64encode(key).decode("ascii")
        elif name == "json":
            try:
                text = json.dumps(key, separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError):
                return None
        else:
            return None
        return path_segment(text)


@dataclass
class ClusterView:
    """The cluster as last read: instances (`/v1/metadata`) and stores (`/v1/stores`)."""

    instances: list[dict[str, Any]]
    stores: dict[str, StoreInfo]
    read_at: float
    scheme: str = "http"
    """Every instance's, as the seed's: a cluster serves HTTPS everywhere or nowhere."""
    active: dict[tuple[str, int], str] = field(default_factory=dict)
    """The URL of each store partition's active instance."""

    def __post_init__(self) -> None:
        for instance in self.instances:
            for store, partitions in instance["active"].items():
                for partition in partitions:
                    self.active[(store, partition)] = _url(self.scheme, instance)

    def urls(self) -> list[str]:
        return [_url(self.scheme, instance) for instance in self.instances]


class ClientLogic:
    """The routing client's state and plans (see the module doc)."""

    def __init__(self, url: str, metadata_max_age: float) -> None:
        if not metadata_max_age > 0:
            raise ValueError("metadata_max_age must be a positive number of seconds")
        self.seeds = [url.rstrip("/")]
        self.scheme = "https" if url.startswith("https://") else "http"
        self.metadata_max_age = metadata_max_age
        self.view: ClusterView | None = None
        self._serdes: dict[str, Serde[Any] | None] = {}
        self._turn = 0

    # -- the view ----------------------------------------------------------------------------

    def _serde(self, name: str) -> Serde[Any] | None:
        if name not in self._serdes:
            try:
                self._serdes[name] = default_registry().serde(name)
            except IqstateError:
                self._serdes[name] = None  # a serde only the service has
        return self._serdes[name]

    def refresh(self) -> Plan:
        """Read the view from the first seed that answers. When none does: `ValueError` if
        one refused the request (a wrong token or URL: asking again cannot help, as for any
        refused request), else `NoInstanceReached` (none could be reached or served now)."""
        errors = []
        refused = False
        for seed in list(self.seeds):
            metadata, stores = yield [
                Call("GET", f"{seed}/v1/metadata"),
                Call("GET", f"{seed}/v1/stores"),
            ]
            if metadata.status == 200 and stores.status == 200:
                self._install(metadata.body, stores.body)
                return self.view
            failed = metadata if metadata.status != 200 else stores
            why = _DISCOVERY_REFUSALS.get(failed.status, "")
            errors.append(f"{seed}: {failed.error or f'HTTP {failed.status}{why}'}")
            refused = refused or failed.status in REFUSALS
        message = f"no iqstate instance answered discovery ({'; '.join(errors)})"
        raise ValueError(message) if refused else NoInstanceReached(message)

    def _install(self, instances: list[dict[str, Any]], stores: dict[str, Any]) -> None:
        infos = {}
        for name, described in stores.items():
            default = described.get("partitioner") == "default"
            serde_name = str(described["key_serde"])
            infos[name] = StoreInfo(
                name,
                int(described["partitions"]),
                serde_name,
                self._serde(serde_name) if default else None,
                described.get("type"),
            )
        self.view = ClusterView(instances, infos, time.monotonic(), self.scheme)
        for url in self.view.urls():  # every known instance can answer discovery next time
            if url not in self.seeds:
                self.seeds.append(url)

    def cluster_status(self) -> Plan:
        """`GET /v1/cluster` from the first seed that answers; `ConnectionError` when none."""
        errors = []
        for seed in list(self.seeds):
            (reply,) = yield [Call("GET", f"{seed}/v1/cluster")]
            if reply.status == 200:
                return reply.body
            errors.append(f"{seed}: {reply.error or f'HTTP {reply.status}'}")
        raise ConnectionError(f"no iqstate instance answered cluster status ({'; '.join(errors)})")

    def current_view(self) -> Plan:
        """The view, read again first when it is older than `metadata_max_age`."""
        view = self.view
        if view is None or time.monotonic() - view.read_at > self.metadata_max_age:
            view = yield from self.refresh()
        return view

    def moved(self) -> None:
        """An answer showed the layout moved: read the view again before the next query."""
        if self.view is not None:
            self.view.read_at = -math.inf

    def any_instance(self, avoid: str | None = None) -> str:
        """A live instance to send a request any instance answers (in turn)."""
        assert self.view is not None
        urls = (
            [url for url in self.view.urls() if url != avoid]
            or [seed for seed in self.seeds if seed != avoid]
            or self.seeds
        )
        self._turn += 1
        return urls[self._turn % len(urls)]

    # -- queries ------------------------------------------------------------------------------

    def query(self, request: StateQueryRequest[Any], acceptable_lag: int | None) -> Plan:
        """Answer an IQv2 request (SPEC 8.3): a plain key lookup by the key route, the rest
        by `POST /v1/query` to the instances hosting the partitions, in parallel."""
        query_body = query_json(request.query)  # raises TypeError before any I/O
        view = yield from self.current_view()
        store = view.stores.get(request.store_name)
        partition = None
        query: Any = request.query
        if store is not None and request.is_all_partitions and keyed(query):
            partition = store.partition_of(query.key)
        if store is not None:
            unknown = _unknown_query_type(store, request, query_body["type"], partition)
            if unknown is not None:
                return unknown
        if (
            store is not None
            and partition is not None
            and isinstance(request.query, KeyQuery)
            and not request.query.is_skip_cache
            and request.position_bound.is_unbounded()
            and not request.is_require_active
            and not request.is_execution_info_enabled
            and (path := store.key_path(request.query.key)) is not None
        ):
            return (yield from self._key_lookup(store, partition, path, acceptable_lag))
        return (yield from self._post(request, query_body, store, partition, acceptable_lag))

    def _key_lookup(
        self, store: StoreInfo, partition: int, path: str, acceptable_lag: int | None
    ) -> Plan:
        """One `GET` of the key route at the partition's active; asked once more, after
        reading the layout again, when no instance answered or none of the partition's
        replicas could (the layout moved: a failover the view had not seen)."""
        suffix = f"/v1/stores/{quote(store.name, safe='')}/keys/{path}"
        if acceptable_lag is not None:
            suffix += f"?acceptable_lag={acceptable_lag}"
        avoid = None
        for attempt in range(2):
            view = yield from self.current_view()
            active = view.active.get((store.name, partition))
            target = active if active is not None and active != avoid else self.any_instance(avoid)
            (reply,) = yield [Call("GET", target + suffix)]
            if not reply.answered:
                self.moved()
                avoid = target
                if attempt == 0:
                    continue
                return StateQueryResult({partition: _unreachable(target, reply)})
            if reply.status == 200:
                body = reply.body
                result: QueryResult[Any] = QueryResult.for_result(body["value"])
                result.position = position_from_json(body["position"])
                if f"{self.scheme}://{body.get('host')}" != target:
                    self.moved()
                return StateQueryResult({int(body["partition"]): result})
            if reply.status == 500:
                raise RemoteServiceError(target, _error_message(reply))
            if reply.status != 503:
                raise _refusal(target, reply)
            code = str((reply.body or {}).get("error", {}).get("code", ""))
            reason = failure_reason_of(code)
            self.moved()
            if attempt == 1 or reason not in _LAYOUT_MOVED:
                break
        return StateQueryResult({partition: QueryResult.for_failure(reason, _error_message(reply))})

    def _post(
        self,
        request: StateQueryRequest[Any],
        query_body: dict[str, Any],
        store: StoreInfo | None,
        key_partition: int | None,
        acceptable_lag: int | None,
    ) -> Plan:
        view = self.view
        assert view is not None
        bound = request.position_bound
        common = {
            "store": request.store_name,
            "query": query_body,
            "bound": None if bound.is_unbounded() else position_to_json(bound.position),
            "require_active": request.is_require_active,
            "execution_info": request.is_execution_info_enabled,
            "acceptable_lag": acceptable_lag,
        }
        name = request.store_name
        groups: dict[str, list[int] | None]
        if not request.is_all_partitions:
            groups = self._by_active(name, sorted(request.partitions))
        elif keyed(request.query):  # the service picks the key's partition; sent to its
            # active when the client knows it
            known = None if key_partition is None else view.active.get((name, key_partition))
            groups = {known or self.any_instance(): None}
        elif store is not None:
            groups = self._by_active(name, range(store.partitions))
        else:  # a store the view does not know yet: any instance answers for all of it
            groups = {self.any_instance(): None}
        results: dict[int, QueryResult[Any]] = {}
        pending = list(groups.items())
        for attempt in range(2):
            calls: list[Call | Wait] = [
                Call("POST", f"{url}/v1/query",
                     {**common, **({} if ps is None else {"partitions": ps})})
                for url, ps in pending
            ]  # fmt: skip
            replies = yield calls
            retry = []
            for (url, partitions), reply in zip(pending, replies, strict=True):
                # the partitions a failure is reported on: those asked, or the key's
                named = partitions or _partitions_of(key_partition, store)
                if not reply.answered:
                    self.moved()
                    if attempt == 0:
                        retry.append((url, partitions))
                        continue
                    if not named:
                        raise ConnectionError(f"no iqstate instance answered: {reply.error}")
                    for partition in named:
                        results[partition] = _unreachable(url, reply)
                    continue
                results.update(self._answers(url, request, named, reply))
            if not retry:
                break
            yield from self.current_view()
            pending = [(self.any_instance(avoid=url), ps) for url, ps in retry]
        return StateQueryResult(dict(sorted(results.items())))

    def _by_active(self, store: str, partitions: Iterable[int]) -> dict[str, list[int] | None]:
        """`partitions` grouped by the instance hosting each as active (any instance for
        a partition without a known active: it forwards)."""
        assert self.view is not None
        by_host: dict[str, list[int] | None] = {}
        for partition in partitions:
            url = self.view.active.get((store, partition)) or self.any_instance()
            listed = by_host.setdefault(url, [])
            assert listed is not None
            listed.append(partition)
        return by_host

    def _answers(
        self,
        url: str,
        request: StateQueryRequest[Any],
        partitions: list[int],
        reply: Reply,
    ) -> dict[int, QueryResult[Any]]:
        """An instance's answer as per-partition results; a refused request raises. An
        instance that cannot answer now (a 503) fails each of `partitions` (those asked,
        or the key's), never an empty success; `ConnectionError` when none is known."""
        if reply.status != 200:
            message = _error_message(reply)
            if reply.status == 500:
                raise RemoteServiceError(url, message)
            if reply.status > 500:
                self.moved()
                if not partitions:
                    raise ConnectionError(f"{url} could not answer: {message}")
                return {
                    p: QueryResult.for_failure(FailureReason.NOT_PRESENT, message)
                    for p in partitions
                }
            raise _refusal(url, reply)
        results: dict[int, QueryResult[Any]] = {}
        for key, entry in reply.body["partitions"].items():
            if entry["ok"]:
                result: QueryResult[Any] = QueryResult.for_result(
                    _value(request.query, entry.get("value"))
                )
            else:
                result = QueryResult.for_failure(FailureReason[entry["failure"]], entry["message"])
                if result.failure_reason in _LAYOUT_MOVED:
                    self.moved()
            if entry.get("host") is not None and f"{self.scheme}://{entry['host']}" != url:
                self.moved()
            if entry.get("position") is not None:
                result.position = position_from_json(entry["position"])
            for info in entry.get("execution_info", ()):
                result.add_execution_info(f"{url}: {info}")
            results[int(key)] = result
        return results

    # -- merged pages ------------------------------------------------------------------------

    def pages(
        self, store: str, query: Query[Any], page_size: int, acceptable_lag: int | None
    ) -> Paging:
        """The merged pages of a range-type `query` over `store`, read one after another on
        one monotonic session (`RemoteQueryClient.range` and `scan`)."""
        row_value = _most_specific(_ROW_VALUES, query)
        if row_value is None:
            raise TypeError(
                f"a {type(query).__name__} cannot be paged: scan takes a RangeQuery, "
                "TimestampedRangeQuery or VersionedRangeQuery"
            )
        rows = jsonin.integer(page_size)  # as the service reads a page's limit
        if rows is None or not 1 <= rows <= MAX_LIMIT:
            raise ValueError(f"page_size must be from 1 to {MAX_LIMIT}, got {page_size!r}")
        return Paging(self, store, query, row_value, rows, acceptable_lag)

    def page(
        self,
        store: str,
        query: Query[Any],
        page_size: int,
        acceptable_lag: int | None,
        cursor: str | None,
        position: Position,
    ) -> Plan:
        """One merged page: `(rows, next cursor, position)`, from any instance."""
        yield from self.current_view()
        body = {
            "store": store,
            "query": query_json(query),
            "merge": True,
            "limit": page_size,
            "cursor": cursor,
            "acceptable_lag": acceptable_lag,
            "bound": None if position.is_empty() else position_to_json(position),
        }
        for attempt in range(_PAGE_RETRIES + 1):
            target = self.any_instance()
            (reply,) = yield [Call("POST", f"{target}/v1/query", body)]
            if not reply.answered:
                self.moved()
                yield from self.current_view()
                target = self.any_instance(avoid=target)
                (reply,) = yield [Call("POST", f"{target}/v1/query", body)]
                if not reply.answered:
                    raise ConnectionError(f"no iqstate instance answered a page: {reply.error}")
            if reply.status != 503 or attempt == _PAGE_RETRIES:
                break
            self.moved()  # busy, or a partition between replicas: ask again after a wait
            yield [Wait(_retry_after(reply))]
        if 400 <= reply.status < 500:
            raise _refusal(target, reply)
        if reply.status != 200:
            raise PageError(target, reply.status, _error_message(reply))
        answer = reply.body
        return answer["rows"], answer["next"], position_from_json(answer["position"] or {})


class Paging:
    """Where a range's paging stands: the next page's plan, until the last page was read."""

    def __init__(
        self,
        logic: ClientLogic,
        store: str,
        query: Query[Any],
        row_value: Callable[[Any], Any],
        page_size: int,
        acceptable_lag: int | None,
    ) -> None:
        self._logic, self._store, self._query = logic, store, query
        self._row_value = row_value
        self._page_size, self._acceptable_lag = page_size, acceptable_lag
        self._cursor: str | None = None
        self._position = Position.empty()
        self._done = False

    def next_page(self) -> Plan | None:
        """The plan of the next page (its answer: the page's `(key, value)` rows), or None
        after the last page."""
        if self._done:
            return None
        return self._read()

    def _read(self) -> Plan:
        rows, self._cursor, read = yield from self._logic.page(
            self._store, self._query, self._page_size, self._acceptable_lag,
            self._cursor, self._position,
        )  # fmt: skip
        self._position = self._position.merge(read)
        self._done = self._cursor is None
        row_value = self._row_value
        return [(key, row_value(value)) for key, value in rows]


class RemoteServiceError(RuntimeError):
    """An instance failed to answer for a reason of its own (HTTP 500): `message` is its
    explanation (for example a store's partitioner refusing a key)."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"{url} failed to answer: {message}")
        self.message = message


class PageError(ConnectionError):
    """A merged page no instance could answer (a `503` naming the partitions that could not
    answer, or another failure of the service's; a request it refused raises as
    `_refusal` says)."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url} could not answer the page (HTTP {status}): {message}")
        self.status = status


def range_query(lower: Any, upper: Any, order: str) -> RangeQuery[Any, Any]:
    """The range `RemoteQueryClient.range` pages through."""
    orders = {"ascending": ResultOrder.ASCENDING, "descending": ResultOrder.DESCENDING}
    if order not in orders:
        raise ValueError(f"order must be 'ascending' or 'descending', got {order!r}")
    return RangeQuery(lower, upper, orders[order])


def bounded(request: StateQueryRequest[Any], position: Position) -> StateQueryRequest[Any]:
    """`request` bounded by everything a session has read, and by its own bound."""
    return request.with_position_bound(
        PositionBound.at(position.merge(request.position_bound.position))
    )
