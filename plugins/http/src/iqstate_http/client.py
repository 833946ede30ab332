"""`RemoteQueryClient`: IQv2 against a cluster of iqstate instances, routed as KIP-535 says.

Given any instance's URL, the client discovers the cluster (`/v1/metadata`) and sends each
partition of a request to the instance hosting it as active. When the active cannot answer
(unreachable, or a per-partition failure such as `NOT_ACTIVE` or `NOT_PRESENT`), the
partition goes to the standbys in order of lag, among those within `acceptable_lag`
(standbys are not asked when it is `None`). Partitions on different instances are asked in
parallel, and the per-partition results are merged without losing which partition said
what. `session()` returns a client whose every query carries the merged position of all
its earlier results as its bound, so a caller's reads never go back in time.

`RemoteQueryClient` is synchronous (partitions on different instances are asked from a
thread pool); `AsyncRemoteQueryClient` is the same client for asyncio (asked with
`asyncio.gather`). Both share the routing below, which does no I/O itself.
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import httpx

from iqstate import (
    FailureReason,
    KeyQuery,
    KeyValueIterator,
    Position,
    PositionBound,
    Query,
    QueryResult,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate_http.codecs import position_from_json, position_to_json

_RETRY_ELSEWHERE = {"NOT_ACTIVE", "NOT_PRESENT", "NOT_UP_TO_BOUND"}


def _key_json(key: Any) -> Any:
    return base64.b64encode(key).decode("ascii") if isinstance(key, bytes) else key


def query_json(query: Query[Any]) -> dict[str, Any]:
    """The JSON form of a built-in query."""
    if isinstance(query, KeyQuery):
        return {"type": "key", "key": _key_json(query.key), "skip_cache": query.is_skip_cache}
    if isinstance(query, RangeQuery):
        return {
            "type": "range",
            "lower": None if query.lower_bound is None else _key_json(query.lower_bound),
            "upper": None if query.upper_bound is None else _key_json(query.upper_bound),
            "order": query.result_order.value,
        }
    if isinstance(query, WindowKeyQuery):
        return {"type": "window_key", "key": _key_json(query.key), "time_from": query.time_from,
                "time_to": query.time_to}  # fmt: skip
    if isinstance(query, WindowRangeQuery):
        return {"type": "window_range", "time_from": query.time_from, "time_to": query.time_to}
    raise TypeError(f"RemoteQueryClient has no JSON form for {type(query).__name__}")


def _value(query: Query[Any], value: Any) -> Any:
    if isinstance(query, RangeQuery | WindowKeyQuery):
        return KeyValueIterator([tuple(pair) for pair in value])
    if isinstance(query, WindowRangeQuery):
        return KeyValueIterator(
            [(Windowed(w["key"], w["start"], w["end"]), w["value"]) for w in value]
        )
    return value


def _unreachable(host: str, error: Exception) -> QueryResult[Any]:
    return QueryResult.for_failure(
        FailureReason.NOT_PRESENT, f"instance {host} could not be reached: {type(error).__name__}"
    )


def _url(instance: dict[str, Any]) -> str:
    return f"http://{instance['host']}:{instance['port']}"


def _remember_instances(seeds: list[str], instances: list[dict[str, Any]]) -> None:
    """Every known instance can answer discovery next time."""
    for instance in instances:
        if _url(instance) not in seeds:
            seeds.append(_url(instance))


def _request_body(request: StateQueryRequest[Any], partitions: list[int]) -> dict[str, Any]:
    bound = request.position_bound
    return {
        "store": request.store_name,
        "query": query_json(request.query),
        "partitions": partitions,
        "bound": None if bound.is_unbounded() else position_to_json(bound.position),
        "require_active": request.is_require_active,
        "execution_info": request.is_execution_info_enabled,
    }


def _answers(
    url: str, request: StateQueryRequest[Any], partitions: list[int], response: httpx.Response
) -> dict[int, QueryResult[Any]]:
    """An instance's response as per-partition results; a refused request raises."""
    if response.status_code != 200:
        message = response.json().get("error", {}).get("message", response.text)
        if response.status_code >= 500:
            return {
                p: QueryResult.for_failure(FailureReason.NOT_PRESENT, message) for p in partitions
            }
        raise ValueError(f"{url} refused the request: {message}")
    results: dict[int, QueryResult[Any]] = {}
    for key, entry in response.json()["partitions"].items():
        if entry["ok"]:
            result: QueryResult[Any] = QueryResult.for_result(
                _value(request.query, entry.get("value"))
            )
        else:
            result = QueryResult.for_failure(FailureReason[entry["failure"]], entry["message"])
        if entry.get("position") is not None:
            result.position = position_from_json(entry["position"])
        for info in entry.get("execution_info", ()):
            result.add_execution_info(f"{url}: {info}")
        results[int(key)] = result
    return results


def _key_partition_answer(response: httpx.Response) -> int:
    if response.status_code != 200:
        raise ValueError(response.json()["error"]["message"])
    return int(response.json()["partition"])


def _lag_in(lags: Any, store: str, partition: int) -> int | None:
    try:
        return int(lags[store][str(partition)]["lag"])
    except (KeyError, ValueError, TypeError):
        return None


class _Routing:
    """The routing of one request, as rounds: which instance to ask for which partitions.

    Round n asks each pending partition's n-th candidate (the active first, then standbys
    within `acceptable_lag`, least lag first); a partition whose answer is a failure that
    another replica might not have (`NOT_ACTIVE`, `NOT_PRESENT`, `NOT_UP_TO_BOUND`), or
    that got no answer, stays pending. No I/O here: the clients do the asking.
    """

    def __init__(
        self,
        request: StateQueryRequest[Any],
        cluster: list[dict[str, Any]],
        acceptable_lag: int | None,
        key_partition: int | None,
    ) -> None:
        self.request = request
        self.store = store = request.store_name
        self.acceptable_lag = acceptable_lag
        self.cluster = cluster
        if not request.is_all_partitions:
            wanted: Iterable[int] = sorted(request.partitions)
        elif key_partition is not None:
            wanted = [key_partition]
        else:
            wanted = sorted({p for i in cluster for p in i["active"].get(store, ())})
        self.wanted = list(wanted)
        self._pending = set(self.wanted)
        self._final: dict[int, QueryResult[Any]] = {}
        self._attempt = 0
        self._candidates: dict[int, list[str]] = {}

    def standbys_to_weigh(self) -> list[str]:
        """The instances whose lags decide the standby order (none without `acceptable_lag`)."""
        if self.acceptable_lag is None:
            return []
        return sorted(
            {
                _url(instance)
                for instance in self.cluster
                for p in self.wanted
                if p in instance["standby"].get(self.store, ())
            }
        )

    def weigh(self, lags: dict[str, Any]) -> None:
        """Order each partition's candidates, given the `/v1/lags` answer of each standby."""
        for partition in self.wanted:
            active, standbys = [], []
            for instance in self.cluster:
                url = _url(instance)
                if partition in instance["active"].get(self.store, ()):
                    active.append(url)
                elif partition in instance["standby"].get(self.store, ()):
                    lag = _lag_in(lags.get(url), self.store, partition)
                    limit = self.acceptable_lag
                    if lag is not None and limit is not None and lag <= limit:
                        standbys.append((lag, url))
            self._candidates[partition] = active + [url for _, url in sorted(standbys)]

    def next_round(self) -> dict[str, list[int]]:
        """Partitions to ask, by instance URL; empty when routing is over."""
        by_host: dict[str, list[int]] = defaultdict(list)
        for partition in sorted(self._pending):
            options = self._candidates[partition]
            if self._attempt < len(options):
                by_host[options[self._attempt]].append(partition)
            elif partition not in self._final:
                self._final[partition] = QueryResult.for_failure(
                    FailureReason.NOT_PRESENT,
                    f"no instance hosts partition {partition} of store {self.store!r}"
                    + (
                        ""
                        if self.acceptable_lag is None
                        else f" within a lag of {self.acceptable_lag}"
                    ),
                )
        self._pending = set()
        self._attempt += 1
        return dict(by_host)

    def record(self, partitions: list[int], answers: dict[int, QueryResult[Any]]) -> None:
        """One instance's answers to the partitions it was asked in this round."""
        for partition, result in answers.items():
            self._final[partition] = result
            if result.is_failure and result.failure_reason.name in _RETRY_ELSEWHERE:
                self._pending.add(partition)
        for partition in partitions:
            if partition not in self._final:
                self._pending.add(partition)

    def result(self) -> StateQueryResult[Any]:
        merged: StateQueryResult[Any] = StateQueryResult()
        for partition in sorted(self._final):
            merged.add_result(partition, self._final[partition])
        return merged


def _keyed(request: StateQueryRequest[Any]) -> bool:
    return request.is_all_partitions and isinstance(request.query, KeyQuery | WindowKeyQuery)


def _no_answer(kind: str, errors: list[str]) -> ConnectionError:
    return ConnectionError(f"no iqstate instance answered {kind} ({'; '.join(errors)})")


class RemoteQueryClient:
    """Routes IQv2 requests across the instances of one iqstate application."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 5.0) -> None:
        self._seeds = [url.rstrip("/")]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=timeout, headers=headers)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="iqstate-client")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._http.close()

    def __enter__(self) -> RemoteQueryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _from_any_seed(
        self, kind: str, method: str, path: str, *, check_status: bool = False, **kwargs: Any
    ) -> httpx.Response:
        errors = []
        for seed in list(self._seeds):
            try:
                response = self._http.request(method, f"{seed}{path}", **kwargs)
                return response.raise_for_status() if check_status else response
            except httpx.HTTPError as error:
                errors.append(f"{seed}: {type(error).__name__}")
        raise _no_answer(kind, errors)

    def cluster(self) -> list[dict[str, Any]]:
        """Every instance with the partitions it hosts, from the first seed that answers."""
        response = self._from_any_seed("discovery", "GET", "/v1/metadata", check_status=True)
        instances: list[dict[str, Any]] = response.json()
        _remember_instances(self._seeds, instances)
        return instances

    def cluster_status(self) -> list[dict[str, Any]]:
        """The cluster as the first seed that answers sees it (`GET /v1/cluster`): live
        instances with each replica's role and lag, then instances that recently left or
        went silent."""
        response = self._from_any_seed("cluster status", "GET", "/v1/cluster", check_status=True)
        statuses: list[dict[str, Any]] = response.json()
        _remember_instances(self._seeds, [s for s in statuses if s["live"]])
        return statuses

    def _lags(self, url: str) -> Any:
        try:
            return self._http.get(f"{url}/v1/lags").json()
        except (httpx.HTTPError, ValueError):
            return None

    def _ask(
        self, url: str, request: StateQueryRequest[Any], partitions: list[int]
    ) -> dict[int, QueryResult[Any]]:
        try:
            response = self._http.post(f"{url}/v1/query", json=_request_body(request, partitions))
        except httpx.HTTPError as error:
            return {p: _unreachable(url, error) for p in partitions}
        return _answers(url, request, partitions, response)

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        """Answer `request` from the instances hosting its partitions (see the module doc)."""
        cluster = self.cluster()
        key_partition = None
        if _keyed(request):
            body = {"store": request.store_name, "key": _key_json(request.query.key)}  # type: ignore[attr-defined]
            key_partition = _key_partition_answer(
                self._from_any_seed("a key look-up", "POST", "/v1/metadata/key", json=body)
            )
        routing = _Routing(request, cluster, acceptable_lag, key_partition)
        routing.weigh({url: self._lags(url) for url in routing.standbys_to_weigh()})
        while by_host := routing.next_round():
            futures = {
                url: self._pool.submit(self._ask, url, request, partitions)
                for url, partitions in by_host.items()
            }
            for url, future in futures.items():
                routing.record(by_host[url], future.result())
        return routing.result()

    def session(self) -> RemoteSession:
        """A session: every query is bounded by the merged position of all earlier results."""
        return RemoteSession(self)


class AsyncRemoteQueryClient:
    """`RemoteQueryClient` for asyncio: the same routing, with `await client.query(...)`."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 5.0) -> None:
        self._seeds = [url.rstrip("/")]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(timeout=timeout, headers=headers)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRemoteQueryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _from_any_seed(
        self, kind: str, method: str, path: str, *, check_status: bool = False, **kwargs: Any
    ) -> httpx.Response:
        errors = []
        for seed in list(self._seeds):
            try:
                response = await self._http.request(method, f"{seed}{path}", **kwargs)
                return response.raise_for_status() if check_status else response
            except httpx.HTTPError as error:
                errors.append(f"{seed}: {type(error).__name__}")
        raise _no_answer(kind, errors)

    async def cluster(self) -> list[dict[str, Any]]:
        """Every instance with the partitions it hosts, from the first seed that answers."""
        response = await self._from_any_seed("discovery", "GET", "/v1/metadata", check_status=True)
        instances: list[dict[str, Any]] = response.json()
        _remember_instances(self._seeds, instances)
        return instances

    async def cluster_status(self) -> list[dict[str, Any]]:
        """The cluster as the first seed that answers sees it (`GET /v1/cluster`)."""
        response = await self._from_any_seed(
            "cluster status", "GET", "/v1/cluster", check_status=True
        )
        statuses: list[dict[str, Any]] = response.json()
        _remember_instances(self._seeds, [s for s in statuses if s["live"]])
        return statuses

    async def _lags(self, url: str) -> Any:
        try:
            return (await self._http.get(f"{url}/v1/lags")).json()
        except (httpx.HTTPError, ValueError):
            return None

    async def _ask(
        self, url: str, request: StateQueryRequest[Any], partitions: list[int]
    ) -> dict[int, QueryResult[Any]]:
        try:
            response = await self._http.post(
                f"{url}/v1/query", json=_request_body(request, partitions)
            )
        except httpx.HTTPError as error:
            return {p: _unreachable(url, error) for p in partitions}
        return _answers(url, request, partitions, response)

    async def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        """Answer `request` from the instances hosting its partitions (see the module doc)."""
        cluster = await self.cluster()
        key_partition = None
        if _keyed(request):
            body = {"store": request.store_name, "key": _key_json(request.query.key)}  # type: ignore[attr-defined]
            key_partition = _key_partition_answer(
                await self._from_any_seed("a key look-up", "POST", "/v1/metadata/key", json=body)
            )
        routing = _Routing(request, cluster, acceptable_lag, key_partition)
        standbys = routing.standbys_to_weigh()
        lags = await asyncio.gather(*(self._lags(url) for url in standbys))
        routing.weigh(dict(zip(standbys, lags, strict=True)))
        while by_host := routing.next_round():
            urls = list(by_host)
            answers = await asyncio.gather(*(self._ask(url, request, by_host[url]) for url in urls))
            for url, answer in zip(urls, answers, strict=True):
                routing.record(by_host[url], answer)
        return routing.result()

    def session(self) -> AsyncRemoteSession:
        """A session: every query is bounded by the merged position of all earlier results."""
        return AsyncRemoteSession(self)


def _bounded(request: StateQueryRequest[Any], position: Position) -> StateQueryRequest[Any]:
    """`request` bounded by everything a session has read, and by its own bound."""
    return request.with_position_bound(
        PositionBound.at(position.merge(request.position_bound.position))
    )


class RemoteSession:
    """Monotonic reads across replicas: each query's bound is everything read before."""

    def __init__(self, client: RemoteQueryClient) -> None:
        self._client = client
        self.position = Position.empty()

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        result = self._client.query(_bounded(request, self.position), acceptable_lag)
        self.position = self.position.merge(result.position)
        return result


class AsyncRemoteSession:
    """`RemoteSession` for `AsyncRemoteQueryClient`."""

    def __init__(self, client: AsyncRemoteQueryClient) -> None:
        self._client = client
        self.position = Position.empty()

    async def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        result = await self._client.query(_bounded(request, self.position), acceptable_lag)
        self.position = self.position.merge(result.position)
        return result
