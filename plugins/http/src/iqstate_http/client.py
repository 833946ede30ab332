"""`RemoteQueryClient`: IQv2 against a cluster of iqstate instances (SPEC 8, 8.2, 8.3).

Given any instance's URL, the client reads the cluster's layout and its stores once and
keeps them (`metadata_max_age`, refreshed when an answer shows the layout moved), computes
a key's partition itself, and sends a keyed query straight to the instance hosting it:
one HTTP request per lookup in the steady state. A request over several partitions goes
to the instances hosting them, in parallel; any instance answers for the whole cluster, so
a layout that moved meanwhile costs a hop, not a wrong answer. `range()` pages through a
whole store in key order; `session()` returns a client whose every query carries the
merged position of all its earlier results as its bound, so a caller's reads never go
back in time.

`RemoteQueryClient` is synchronous (parallel requests from a thread pool);
`AsyncRemoteQueryClient` is the same client for asyncio (`asyncio.gather`). Both run the
plans of `client_plan`, which hold all the logic and do no I/O.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, ExitStack
from types import TracebackType
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from iqstate import ChangeBatch, Position, Query, StateQueryRequest, StateQueryResult
from iqstate_http.client_plan import (
    Call,
    ClientLogic,
    NoInstanceReached,
    Paging,
    Plan,
    Reply,
    Wait,
    bounded,
    query_json,
    range_query,
    run_plan,
)
from iqstate_http.client_subscribe import (
    STREAM_SILENCE,
    RemoteSubscriptionLogic,
    StreamEnded,
)
from iqstate_http.error_text import error_text

__all__ = [
    "AsyncRemoteQueryClient",
    "AsyncRemoteSession",
    "AsyncRemoteSubscription",
    "RemoteQueryClient",
    "RemoteSession",
    "RemoteSubscription",
    "query_json",
]

_STREAM_TIMEOUT = httpx.Timeout(10.0, read=STREAM_SILENCE)


def _reply(response: httpx.Response) -> Reply:
    try:
        body = response.json()
    except ValueError:
        body = None
    wait = response.headers.get("retry-after")
    retry_after = float(wait) if wait is not None and wait.isdigit() else None
    return Reply(response.status_code, body, retry_after=retry_after)


def _tls(verify: bool | str) -> bool | ssl.SSLContext:
    """httpx's `verify`: a CA bundle's path becomes a context that trusts it."""
    return ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class RemoteQueryClient:
    """Routes IQv2 requests across the instances of one iqstate application.

    `metadata_max_age`: seconds the cluster's layout is kept before it is read again.
    `transport`: an httpx transport to send requests through (default: httpx's own).
    `verify`, for an `https://` url: check the instances' certificates against the system's
    CAs (True), a CA bundle (its path), or not at all (False). Every instance is reached
    with the url's scheme."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 5.0,
        metadata_max_age: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        verify: bool | str = True,
    ) -> None:
        self._logic = ClientLogic(url, metadata_max_age)
        self._http = httpx.Client(
            timeout=timeout, headers=_headers(token), transport=transport, verify=_tls(verify)
        )
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

    def _send_one(self, call: Call | Wait) -> Reply:
        if isinstance(call, Wait):
            time.sleep(call.seconds)
            return Reply()
        try:
            return _reply(self._http.request(call.method, call.url, json=call.json))
        except httpx.HTTPError as error:
            return Reply(error=error_text(error))

    def _send(self, calls: list[Call | Wait]) -> list[Reply]:
        if len(calls) == 1:
            return [self._send_one(calls[0])]
        return list(self._pool.map(self._send_one, calls))

    def _run(self, plan: Plan) -> Any:
        return run_plan(plan, self._send)

    def cluster(self) -> list[dict[str, Any]]:
        """Every instance with the partitions it hosts, read now from the first seed that
        answers."""
        instances: list[dict[str, Any]] = self._run(self._logic.refresh()).instances
        return instances

    def cluster_status(self) -> list[dict[str, Any]]:
        """The cluster as an instance sees it (`GET /v1/cluster`): live instances with each
        replica's role and lag, then instances that recently left or went silent."""
        statuses: list[dict[str, Any]] = self._run(self._logic.cluster_status())
        return statuses

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        """Answer `request` for the whole cluster (see the module doc); `acceptable_lag`
        lets standbys that far behind answer (default: running actives only)."""
        result: StateQueryResult[Any] = self._run(self._logic.query(request, acceptable_lag))
        return result

    def partition_for(self, store: str, key: Any) -> int | None:
        """The partition of `key` in `store` as this client computes it (the runtime's
        rule, from the store's partitions and key serde); None when only the service can
        say (a custom partitioner, a serde this client lacks, an unknown store)."""
        view = self._run(self._logic.current_view())
        info = view.stores.get(store)
        return None if info is None else info.partition_of(key)

    def range(
        self,
        store: str,
        lower: Any = None,
        upper: Any = None,
        *,
        order: str = "ascending",
        page_size: int = 1000,
        acceptable_lag: int | None = None,
    ) -> Iterator[tuple[Any, Any]]:
        """Every `(key, value)` of `store` from `lower` to `upper` (inclusive, either may be
        None), in key order across partitions, read page by page on one monotonic
        session; keys and values in their JSON forms."""
        query = range_query(lower, upper, order)
        return self.scan(store, query, page_size=page_size, acceptable_lag=acceptable_lag)

    def scan(
        self,
        store: str,
        query: Query[Any],
        *,
        page_size: int = 1000,
        acceptable_lag: int | None = None,
    ) -> Iterator[tuple[Any, Any]]:
        """Every row of a range-type `query` (`RangeQuery`, `TimestampedRangeQuery`,
        `VersionedRangeQuery`) over all of `store`, merged across partitions in the
        query's key order and read page by page on one monotonic session: `(key, value)`,
        `(key, ValueAndTimestamp)`, `(key, VersionedRecord)`; keys and values in their JSON
        forms. A `TypeError` for another query type, before anything is sent."""
        paging = self._logic.pages(store, query, page_size, acceptable_lag)
        return self._rows(paging)

    def _rows(self, paging: Paging) -> Iterator[tuple[Any, Any]]:
        while (plan := paging.next_page()) is not None:
            yield from self._run(plan)

    def session(self) -> RemoteSession:
        """A session: every query is bounded by the merged position of all earlier results."""
        return RemoteSession(self)

    def subscribe(
        self,
        store: str,
        *,
        key: Any = None,
        lower: Any = None,
        upper: Any = None,
        prefix: Any = None,
        from_cursor: str | None = None,
        partitions: Iterable[int] | None = None,
        acceptable_lag: int | None = None,
        max_pending: int | None = None,
        reconnect_timeout: float = 60.0,
    ) -> RemoteSubscription:
        """Follow `store`'s committed changes through the cluster (`app.subscribe`'s
        arguments; keys and values in their JSON forms): an iterator of `ChangeBatch`es
        that reconnects to another instance with its last cursor when its instance goes
        away (`iqstate_http.client_subscribe`)."""
        return RemoteSubscription(
            self,
            RemoteSubscriptionLogic(
                self._logic, store, {"key": key, "lower": lower, "upper": upper,
                "prefix": prefix}, from_cursor, partitions, acceptable_lag, max_pending,
                reconnect_timeout,
            ),
        )  # fmt: skip

    def _open_stream(
        self, stack: ExitStack, url: str, headers: dict[str, str]
    ) -> httpx.Response | Iterator[ServerSentEvent]:
        """The events at `url`, or the response that refused to stream them."""
        source = stack.enter_context(
            connect_sse(self._http, "GET", url, headers=headers, timeout=_STREAM_TIMEOUT)
        )
        if source.response.status_code != 200:
            source.response.read()
            return source.response
        return source.iter_sse()


class AsyncRemoteQueryClient:
    """`RemoteQueryClient` for asyncio: the same routing, with `await client.query(...)`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 5.0,
        metadata_max_age: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: bool | str = True,
    ) -> None:
        self._logic = ClientLogic(url, metadata_max_age)
        self._http = httpx.AsyncClient(
            timeout=timeout, headers=_headers(token), transport=transport, verify=_tls(verify)
        )

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

    async def _send_one(self, call: Call | Wait) -> Reply:
        if isinstance(call, Wait):
            await asyncio.sleep(call.seconds)
            return Reply()
        try:
            return _reply(await self._http.request(call.method, call.url, json=call.json))
        except httpx.HTTPError as error:
            return Reply(error=error_text(error))

    async def _run(self, plan: Plan) -> Any:
        try:
            calls = next(plan)
            while True:
                replies = await asyncio.gather(*(self._send_one(call) for call in calls))
                calls = plan.send(list(replies))
        except StopIteration as done:
            return done.value

    async def cluster(self) -> list[dict[str, Any]]:
        """Every instance with the partitions it hosts, read now from the first seed that
        answers."""
        instances: list[dict[str, Any]] = (await self._run(self._logic.refresh())).instances
        return instances

    async def cluster_status(self) -> list[dict[str, Any]]:
        """The cluster as an instance sees it (`GET /v1/cluster`)."""
        statuses: list[dict[str, Any]] = await self._run(self._logic.cluster_status())
        return statuses

    async def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        """Answer `request` for the whole cluster (see `RemoteQueryClient.query`)."""
        result: StateQueryResult[Any] = await self._run(self._logic.query(request, acceptable_lag))
        return result

    async def partition_for(self, store: str, key: Any) -> int | None:
        """The partition of `key` as this client computes it (see `RemoteQueryClient`)."""
        view = await self._run(self._logic.current_view())
        info = view.stores.get(store)
        return None if info is None else info.partition_of(key)

    def range(
        self,
        store: str,
        lower: Any = None,
        upper: Any = None,
        *,
        order: str = "ascending",
        page_size: int = 1000,
        acceptable_lag: int | None = None,
    ) -> AsyncIterator[tuple[Any, Any]]:
        """`RemoteQueryClient.range` for asyncio: `async for key, value in client.range(...)`."""
        query = range_query(lower, upper, order)
        return self.scan(store, query, page_size=page_size, acceptable_lag=acceptable_lag)

    def scan(
        self,
        store: str,
        query: Query[Any],
        *,
        page_size: int = 1000,
        acceptable_lag: int | None = None,
    ) -> AsyncIterator[tuple[Any, Any]]:
        """`RemoteQueryClient.scan` for asyncio: `async for key, row in client.scan(...)`."""
        paging = self._logic.pages(store, query, page_size, acceptable_lag)
        return self._rows(paging)

    async def _rows(self, paging: Paging) -> AsyncIterator[tuple[Any, Any]]:
        while (plan := paging.next_page()) is not None:
            for row in await self._run(plan):
                yield row

    def session(self) -> AsyncRemoteSession:
        """A session: every query is bounded by the merged position of all earlier results."""
        return AsyncRemoteSession(self)

    def subscribe(
        self,
        store: str,
        *,
        key: Any = None,
        lower: Any = None,
        upper: Any = None,
        prefix: Any = None,
        from_cursor: str | None = None,
        partitions: Iterable[int] | None = None,
        acceptable_lag: int | None = None,
        max_pending: int | None = None,
        reconnect_timeout: float = 60.0,
    ) -> AsyncRemoteSubscription:
        """`RemoteQueryClient.subscribe` for asyncio: `async for batch in ...`."""
        return AsyncRemoteSubscription(
            self,
            RemoteSubscriptionLogic(
                self._logic, store, {"key": key, "lower": lower, "upper": upper,
                "prefix": prefix}, from_cursor, partitions, acceptable_lag, max_pending,
                reconnect_timeout,
            ),
        )  # fmt: skip

    async def _open_stream(
        self, stack: AsyncExitStack, url: str, headers: dict[str, str]
    ) -> httpx.Response | AsyncIterator[ServerSentEvent]:
        """The events at `url`, or the response that refused to stream them."""
        source = await stack.enter_async_context(
            aconnect_sse(self._http, "GET", url, headers=headers, timeout=_STREAM_TIMEOUT)
        )
        if source.response.status_code != 200:
            await source.response.aread()
            return source.response
        return source.aiter_sse()


class RemoteSession:
    """Monotonic reads across replicas: each query's bound is everything read before.
    Threads may share a session: what each query read is merged in under a lock (a
    merge lost to another thread's would let a later query read backwards)."""

    def __init__(self, client: RemoteQueryClient) -> None:
        self._client = client
        self.position = Position.empty()
        self._merging = threading.Lock()

    def query(
        self, request: StateQueryRequest[Any], acceptable_lag: int | None = None
    ) -> StateQueryResult[Any]:
        result = self._client.query(bounded(request, self.position), acceptable_lag)
        with self._merging:
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
        result = await self._client.query(bounded(request, self.position), acceptable_lag)
        self.position = self.position.merge(result.position)
        return result


class RemoteSubscription:
    """`RemoteQueryClient.subscribe`'s iterator of `ChangeBatch`es; `cursor` resumes it
    (`from_cursor=`), `close()` ends it (also as a context manager)."""

    def __init__(self, client: RemoteQueryClient, logic: RemoteSubscriptionLogic) -> None:
        self._client, self._logic = client, logic
        self._stack = ExitStack()
        self._events: Iterator[ServerSentEvent] | None = None
        self._closed = False

    @property
    def cursor(self) -> str | None:
        return self._logic.cursor

    def __iter__(self) -> RemoteSubscription:
        return self

    def __next__(self) -> ChangeBatch:
        while not self._closed:
            try:
                batch = self._step()
            except BaseException:
                self._disconnect()
                raise
            if isinstance(batch, ChangeBatch):
                return batch
            if batch:
                self._disconnect()
                time.sleep(batch)
        raise StopIteration

    def _step(self) -> ChangeBatch | float | None:
        """A batch, None (read on), or the seconds to wait before reconnecting."""
        if self._events is None:
            try:
                url, headers = self._client._run(self._logic.connect())
            except NoInstanceReached as error:  # down, or restarting: wait for one
                return self._logic.broke(str(error))
            try:
                opened = self._client._open_stream(self._stack, url, headers)
            except httpx.HTTPError as error:
                return self._logic.broke(error_text(error))
            if isinstance(opened, httpx.Response):
                return self._logic.refused(opened.status_code, opened.content)
            self._logic.opened()
            self._events = opened
        try:
            sse = next(self._events)
            return self._logic.event(sse.event, sse.data, sse.id)
        except StopIteration:
            return self._logic.broke("the instance closed the stream")
        except httpx.HTTPError as error:
            return self._logic.broke(error_text(error))
        except StreamEnded as ended:
            return self._logic.broke(str(ended), served=not ended.no_replica)

    def _disconnect(self) -> None:
        self._events = None
        self._stack.close()

    def close(self) -> None:
        """Stop following (idempotent)."""
        self._closed = True
        self._disconnect()

    def __enter__(self) -> RemoteSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRemoteSubscription:
    """`RemoteSubscription` for `AsyncRemoteQueryClient`: `async for batch in ...`,
    `await aclose()`."""

    def __init__(self, client: AsyncRemoteQueryClient, logic: RemoteSubscriptionLogic) -> None:
        self._client, self._logic = client, logic
        self._stack = AsyncExitStack()
        self._events: AsyncIterator[ServerSentEvent] | None = None
        self._closed = False

    @property
    def cursor(self) -> str | None:
        return self._logic.cursor

    def __aiter__(self) -> AsyncRemoteSubscription:
        return self

    async def __anext__(self) -> ChangeBatch:
        while not self._closed:
            try:
                batch = await self._step()
            except BaseException:
                await self._disconnect()
                raise
            if isinstance(batch, ChangeBatch):
                return batch
            if batch:
                await self._disconnect()
                await asyncio.sleep(batch)
        raise StopAsyncIteration

    async def _step(self) -> ChangeBatch | float | None:
        """A batch, None (read on), or the seconds to wait before reconnecting."""
        if self._events is None:
            try:
                url, headers = await self._client._run(self._logic.connect())
            except NoInstanceReached as error:  # down, or restarting: wait for one
                return self._logic.broke(str(error))
            try:
                opened = await self._client._open_stream(self._stack, url, headers)
            except httpx.HTTPError as error:
                return self._logic.broke(error_text(error))
            if isinstance(opened, httpx.Response):
                return self._logic.refused(opened.status_code, opened.content)
            self._logic.opened()
            self._events = opened
        try:
            sse = await anext(self._events)
            return self._logic.event(sse.event, sse.data, sse.id)
        except StopAsyncIteration:
            return self._logic.broke("the instance closed the stream")
        except httpx.HTTPError as error:
            return self._logic.broke(error_text(error))
        except StreamEnded as ended:
            return self._logic.broke(str(ended), served=not ended.no_replica)

    async def _disconnect(self) -> None:
        self._events = None
        await self._stack.aclose()

    async def aclose(self) -> None:
        """Stop following (idempotent)."""
        self._closed = True
        await self._disconnect()

    async def __aenter__(self) -> AsyncRemoteSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
