"""One subscription's Server-Sent Events, merged from the partitions' hosts (SPEC 8.1, 12).

An instance follows the partitions it hosts as a replica that may answer (the running
active; a standby within `acceptable_lag`, as `replica_choice` orders them) itself, and
opens the same stream on the instance hosting each of the others (one hop). Every event
goes out with the merged cursor as its `id`: each partition's progress as of the last
event sent for it, so resuming from any event's id, on any instance, continues every
partition from where it was.

When an upstream ends (its host went away, a rebalance moved its partitions) its
partitions are followed again elsewhere, from the merged cursor: replicas that follow a
changelog share its offsets as marks, so the new host replays after them. A partition no
replica takes within `resume_timeout` ends the stream with `unavailable`, and a subscriber
more than `max_pending` events of a partition behind ends it with `lagged` (per partition,
as `app.subscribe` counts): each final event names the
reason and the cursor to resume from. Events at or before a partition's progress (a
replica behind the one that served the partition before) are dropped: the stream never
goes back in time. When the server shuts down (`shutdown` set), the stream ends with
`unavailable` too, so that a client resumes on another instance, or here once it is back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx
from sse_starlette import ServerSentEvent

from iqstate import Application
from iqstate.errors import IqstateError
from iqstate.subscriptions.cursor import Cursor
from iqstate_http.change_events import already_past
from iqstate_http.change_upstreams import (
    END_EVENT,
    LAGGED,
    Ended,
    Event,
    Following,
    Item,
    Lagged,
    follow_local,
    follow_remote,
)
from iqstate_http.codecs import path_segment
from iqstate_http.outage import Outage
from iqstate_http.replica_choice import ReplicaChoice

UNAVAILABLE = "unavailable"
"""An end event's `reason` when a partition found no replica to follow it."""
ENDED = "ended"
"""An end event's `reason` on a forwarded stream whose partitions left this instance."""
SHUTTING_DOWN = "the instance is shutting down: resume on another, or here once it is back"


@dataclass(frozen=True)
class ChangeRequest:
    """A checked request of `/v1/stores/{store}/changes`.

    `filters`: `app.subscribe`'s key arguments; `filter_query`: the same as the request
    spelled them (forwarded unchanged); `forwarded`: follow this instance's replicas only."""

    store: str
    filters: Mapping[str, Any]
    filter_query: Mapping[str, str]
    cursor: Cursor
    partitions: tuple[int, ...]
    acceptable_lag: int | None
    max_pending: int
    forwarded: bool
    authorization: str | None


@dataclass(frozen=True)
class StreamSettings:
    """`resume_timeout`: seconds a partition may go without a replica before the stream
    ends; `retry_interval`: the wait between tries; `ping_interval`: seconds between the
    keep-alive comments of an idle stream (proxies cut silent connections); `scheme`: the
    instances' URLs' (the service sets it: https when it serves TLS)."""

    resume_timeout: float = 30.0
    retry_interval: float = 0.5
    ping_interval: float = 15.0
    scheme: str = "http"


class ChangeStream:
    """The events of one request (see the module doc); `events()` yields them once."""

    def __init__(
        self,
        app: Application,
        replicas: ReplicaChoice,
        peers: httpx.AsyncClient,
        request: ChangeRequest,
        settings: StreamSettings,
    ) -> None:
        self._app, self._replicas, self._peers = app, replicas, peers
        self._request, self._settings = request, settings
        self._cursor = request.cursor
        self._queue: asyncio.Queue[Item | None] = asyncio.Queue()
        """What the upstreams bring; None: the server is shutting down."""
        self.shutdown = anyio.Event()
        """Set when the server shuts down: the stream ends with its final event."""
        self._pending: dict[int, int] = {}
        """Events of each partition queued and not sent yet."""
        self._lagged: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._outages: dict[int, Outage] = {}
        """Per partition an upstream stopped serving once, its outage."""

    @property
    def cursor(self) -> str:
        """The cursor after the last event sent."""
        return self._cursor.text

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """Every batch of the subscription's partitions, then a final event when the stream
        ends by itself (a subscriber that disconnects just stops it)."""
        try:
            self._spawn(self._end_at_shutdown())
            self._follow(self._request.partitions)
            while True:
                if self._lagged is not None:
                    yield self._final(LAGGED, self._lagged)
                    return
                if self.shutdown.is_set():  # before events still queued: a slow client
                    yield self._final(UNAVAILABLE, SHUTTING_DOWN)  # resumes from the cursor
                    return
                item = await self._queue.get()
                if item is None:
                    continue
                if isinstance(item, Event):
                    self._pending[item.partition] -= 1
                    if already_past(
                        self._cursor.progress, item.partition, item.progress, item.snapshot
                    ):
                        continue
                    outage = self._outages.get(item.partition)
                    if outage is not None:
                        outage.served()
                    self._cursor = self._cursor.advanced(item.partition, item.progress)
                    yield ServerSentEvent(data=item.data, id=self._cursor.text)
                elif isinstance(item, Lagged):
                    self._lagged = item.reason
                elif isinstance(item, Following):
                    self._following(item.partitions)
                elif self._request.forwarded:  # one hop: the caller resumes elsewhere
                    yield self._final(ENDED, item.reason, no_replica=not item.served)
                    return
                elif (gone := self._resume(item)) is not None:
                    yield self._final(UNAVAILABLE, gone, no_replica=True)
                    return
        finally:
            for task in self._tasks:
                task.cancel()

    async def _end_at_shutdown(self) -> None:
        await self.shutdown.wait()
        self._queue.put_nowait(None)

    def _final(self, reason: str, message: str, *, no_replica: bool = False) -> ServerSentEvent:
        """The end event; `no_replica`: no replica served a partition lately (none found
        for `resume_timeout`, or, one hop away, none hosted there)."""
        cursor = self._cursor.text
        body: dict[str, Any] = {"reason": reason, "message": message, "cursor": cursor}
        if no_replica:
            body["no_replica"] = True
        return ServerSentEvent(data=json.dumps(body), event=END_EVENT, id=cursor)

    def _sink(self, item: Item) -> bool:
        if self._lagged is not None:
            return False
        if isinstance(item, Event):
            pending = self._pending.get(item.partition, 0)
            if pending >= self._request.max_pending:
                self._lagged = (
                    f"the subscriber fell behind partition {item.partition}: {pending + 1} "
                    f"events unsent, more than max_pending={self._request.max_pending}"
                )
                self._queue.put_nowait(Lagged(self._lagged))  # wakes a waiting merge
                return False
            self._pending[item.partition] = pending + 1
        self._queue.put_nowait(item)
        return True

    # -- upstreams ---------------------------------------------------------------------------

    def _follow(self, partitions: tuple[int, ...]) -> None:
        """Start upstreams for `partitions`: this instance's replicas that may answer, the
        others' hosts; those without a replica now are tried again after a wait."""
        request = self._request
        local: list[int] = []
        remote: dict[str, list[int]] = {}
        missing: list[int] = []
        for partition in partitions:
            try:
                chosen = self._replicas.candidates(request.store, partition, request.acceptable_lag)
            except IqstateError as error:  # the application stopped: no replica here now
                self._sink(Ended(partitions, f"{type(error).__name__}: {error}"))
                return
            if request.forwarded:
                chosen = [replica for replica in chosen if replica.local]
            if not chosen:
                missing.append(partition)
            elif chosen[0].local:
                local.append(partition)
            else:
                remote.setdefault(chosen[0].host, []).append(partition)
        cursor = self._cursor.text
        if local:
            self._spawn(
                follow_local(
                    self._app,
                    request.store,
                    request.filters,
                    tuple(local),
                    cursor,
                    request.max_pending,
                    self._sink,
                    self._serves_here,
                )
            )
        for host, numbers in remote.items():
            self._spawn(
                follow_remote(
                    self._peers, self._url(host, numbers), self._headers(cursor),
                    tuple(numbers), self._sink,
                )
            )  # fmt: skip
        if missing:
            self._sink(Ended(tuple(missing), "no replica may serve them now", served=False))

    def _following(self, partitions: tuple[int, ...]) -> None:
        """An upstream serves `partitions` now: their outages pause."""
        now = time.monotonic()
        for partition in partitions:
            self._outage(partition).opened(now)

    def _resume(self, ended: Ended) -> str | None:
        """Follow `ended`'s partitions again after a wait; the reason to end the stream
        when one of them has gone unserved longer than `resume_timeout`."""
        now = time.monotonic()
        for partition in ended.partitions:
            outage = self._outage(partition)
            outage.broke(now, served=ended.served)
            if outage.unserved_s(now) > self._settings.resume_timeout:
                return (
                    f"partition {partition} of store {self._request.store!r} found no replica "
                    f"to follow it for {self._settings.resume_timeout:g} s: {ended.reason}"
                )
        self._replicas.invalidate()

        async def later() -> None:
            await asyncio.sleep(self._settings.retry_interval)
            self._follow(ended.partitions)

        self._spawn(later())
        return None

    def _serves_here(self, partition: int) -> bool:
        """Whether this instance's replica of `partition` may still serve the stream (the
        rule that chose it: `replica_choice`)."""
        replica = self._replicas.local(self._request.store, partition)
        return replica is not None and replica.within(self._request.acceptable_lag)

    def _outage(self, partition: int) -> Outage:
        outage = self._outages.get(partition)
        if outage is None:
            outage = self._outages[partition] = Outage()
        return outage

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _url(self, host: str, partitions: list[int]) -> str:
        request = self._request
        query = {**request.filter_query, "partitions": ",".join(map(str, partitions))}
        query["max_pending"] = str(request.max_pending)
        if request.acceptable_lag is not None:
            query["acceptable_lag"] = str(request.acceptable_lag)
        path = f"/v1/stores/{path_segment(request.store)}/changes"
        return f"{self._settings.scheme}://{host}{path}?{urlencode(query)}"

    def _headers(self, cursor: str) -> dict[str, str]:
        headers = {"last-event-id": cursor}
        if self._request.authorization is not None:
            headers["authorization"] = self._request.authorization
        return headers
