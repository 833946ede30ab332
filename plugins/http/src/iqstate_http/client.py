"""`RemoteQueryClient`: IQv2 against a cluster of iqstate instances, routed as KIP-535 says.

Given any instance's URL, the client discovers the cluster (`/v1/metadata`) and sends each
partition of a request to the instance hosting it as active. When the active cannot answer
(unreachable, or a per-partition failure such as `NOT_ACTIVE` or `NOT_PRESENT`), the
partition goes to the standbys in order of lag, among those within `acceptable_lag`
(standbys are not asked when it is `None`). Partitions on different instances are asked in
parallel, and the per-partition results are merged without losing which partition said
what. `session()` returns a client whose every query carries the merged position of all
its earlier results as its bound, so a caller's reads never go back in time.
"""

from __future__ import annotations

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

    # -- discovery ---------------------------------------------------------------------

    def cluster(self) -> list[dict[str, Any]]:
        """Every instance with the partitions it hosts, from the first seed that answers."""
        errors = []
        for seed in list(self._seeds):
            try:
                response = self._http.get(f"{seed}/v1/metadata")
                response.raise_for_status()
            except httpx.HTTPError as error:
                errors.append(f"{seed}: {type(error).__name__}")
                continue
            instances: list[dict[str, Any]] = response.json()
            for instance in instances:  # every known instance can answer discovery next time
                url = f"http://{instance['host']}:{instance['port']}"
                if url not in self._seeds:
                    self._seeds.append(url)
            return instances
        raise ConnectionError(f"no iqstate instance answered discovery ({'; '.join(errors)})")

    def _lag(self, url: str, store: str, partition: int) -> int | None:
        try:
            lags = self._http.get(f"{url}/v1/lags").json()
            return int(lags[store][str(partition)]["lag"])
        except (httpx.HTTPError, KeyError, ValueError, TypeError):
            return None

    def _candidates(
        self, cluster: list[dict[str, Any]], store: str, partition: int, acceptable_lag: int | None
    ) -> list[str]:
        """The active's URL first, then standbys within `acceptable_lag`, least lag first."""
        active, standbys = [], []
        for instance in cluster:
            url = f"http://{instance['host']}:{instance['port']}"
            if partition in instance["active"].get(store, ()):
                active.append(url)
            elif partition in instance["standby"].get(store, ()) and acceptable_lag is not None:
                lag = self._lag(url, store, partition)
                if lag is not None and lag <= acceptable_lag:
                    standbys.append((lag, url))
        return active + [url for _, url in sorted(standbys)]

    def _key_partition(self, store: str, key: Any) -> int:
        errors = []
        for seed in list(self._seeds):
            try:
                response = self._http.post(
                    f"{seed}/v1/metadata/key", json={"store": store, "key": _key_json(key)}
                )
            except httpx.HTTPError as error:
                errors.append(f"{seed}: {type(error).__name__}")
                continue
            if response.status_code != 200:
                raise ValueError(response.json()["error"]["message"])
            return int(response.json()["partition"])
        raise ConnectionError(f"no iqstate instance answered ({'; '.join(errors)})")

    # -- querying ------------------------------------------------------------------------

    def _ask(
        self, url: str, request: StateQueryRequest[Any], partitions: list[int]
    ) -> dict[int, QueryResult[Any]]:
        body = {
            "store": request.store_name,
            "query": query_json(request.query),
            "partitions": partitions,
            "bound": position_to_json(request.position_bound.position)
            if not request.position_bound.is_unbounded()
            else None,
            "require_active": request.is_require_active,
            "execution_info": request.is_execution_info_enabled,
        }
        try:
            response = self._http.post(f"{url}/v1/query", json=body)
        except httpx.HTTPError as error:
            return {p: _unreachable(url, error) for p in partitions}
        if response.status_code != 200:
            message = response.json().get("error", {}).get("message", response.text)
            if response.status_code >= 500:
                return {
                    p: QueryResult.for_failure(FailureReason.NOT_PRESENT, message)
                    for p in partitions
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

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        """Answer `request` from the instances hosting its partitions (see the module doc)."""
        cluster = self.cluster()
        store = request.store_name
        if not request.is_all_partitions:
            wanted: Iterable[int] = sorted(request.partitions)
        elif isinstance(request.query, KeyQuery | WindowKeyQuery):
            wanted = [self._key_partition(store, request.query.key)]
        else:
            wanted = sorted({p for i in cluster for p in i["active"].get(store, ())})
        candidates = {p: self._candidates(cluster, store, p, acceptable_lag) for p in wanted}
        final: dict[int, QueryResult[Any]] = {}
        attempt = 0
        pending = {p for p in wanted}
        while pending:
            by_host: dict[str, list[int]] = defaultdict(list)
            for partition in sorted(pending):
                options = candidates[partition]
                if attempt < len(options):
                    by_host[options[attempt]].append(partition)
                elif partition not in final:
                    final[partition] = QueryResult.for_failure(
                        FailureReason.NOT_PRESENT,
                        f"no instance hosts partition {partition} of store {store!r}"
                        + ("" if acceptable_lag is None else f" within a lag of {acceptable_lag}"),
                    )
            if not by_host:
                break
            futures = {
                url: self._pool.submit(self._ask, url, request, partitions)
                for url, partitions in by_host.items()
            }
            pending = set()
            for url, future in futures.items():
                for partition, result in future.result().items():
                    final[partition] = result
                    if result.is_failure and result.failure_reason.name in _RETRY_ELSEWHERE:
                        pending.add(partition)
                for partition in by_host[url]:
                    if partition not in final:
                        pending.add(partition)
            attempt += 1
        merged: StateQueryResult[Any] = StateQueryResult()
        for partition in sorted(final):
            merged.add_result(partition, final[partition])
        return merged

    def session(self) -> RemoteSession:
        """A session: every query is bounded by the merged position of all earlier results."""
        return RemoteSession(self)


class RemoteSession:
    """Monotonic reads across replicas: each query's bound is everything read before."""

    def __init__(self, client: RemoteQueryClient) -> None:
        self._client = client
        self.position = Position.empty()

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        bound = self.position.merge(request.position_bound.position)
        result = self._client.query(
            request.with_position_bound(PositionBound.at(bound)), acceptable_lag
        )
        self.position = self.position.merge(result.position)
        return result
