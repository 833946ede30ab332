"""Where a merged change stream's events come from: this instance's subscription to the
partitions it hosts, or the same stream opened on the instance that hosts others (SPEC 8.1).

Each upstream runs as a task and hands what it reads to its merge (`change_stream`) through
`Sink`: an `Event` per batch, then `Ended` (its partitions should be resumed elsewhere) or
`Lagged` (the subscriber fell behind: the whole stream ends). It stops early when the sink
says so (the merge's buffer is full).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse
from starlette.concurrency import run_in_threadpool

from iqstate import Application, Subscription, SubscriptionEndedError, SubscriptionLaggedError
from iqstate.errors import IqstateError
from iqstate.subscriptions.cursor import Cursor, Progress
from iqstate_http.change_events import batch_json
from iqstate_http.codecs import json_bytes
from iqstate_http.error_text import error_text
from iqstate_http.forwarding import FORWARDED_HEADER

END_EVENT = "end"
"""The name of a stream's final event (batches are unnamed: `message`, as `EventSource`'s
`onmessage` reads them)."""
LAGGED = "lagged"
"""An end event's `reason` when the subscriber fell behind."""

ELIGIBILITY_CHECK_S = 0.5
"""How often a local upstream asks whether its replicas may still serve the stream."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One batch of one partition: its progress (from its cursor) and its JSON text."""

    partition: int
    progress: Progress
    snapshot: bool
    data: str


@dataclass(frozen=True)
class Ended:
    """An upstream stopped: its `partitions` are to be followed elsewhere. `served`: False
    when it had found no replica to serve them (one hop away)."""

    partitions: tuple[int, ...]
    reason: str
    served: bool = True


@dataclass(frozen=True)
class Following:
    """An upstream serves `partitions` from now on (it may send nothing for a while)."""

    partitions: tuple[int, ...]


@dataclass(frozen=True)
class Lagged:
    """The subscriber fell behind: the merged stream ends with `reason`."""

    reason: str


Item = Event | Ended | Following | Lagged
Sink = Callable[[Item], bool]
"""Takes an item; False when the upstream is to stop (the merge will not take more)."""


def progress_of(cursor: str, partition: int) -> Progress:
    """The progress of `partition` a batch's cursor records."""
    return Cursor.parse(cursor).progress[partition]


async def follow_local(
    app: Application,
    store: str,
    filters: Mapping[str, Any],
    partitions: tuple[int, ...],
    cursor: str,
    max_pending: int,
    sink: Sink,
    may_serve: Callable[[int], bool] | None = None,
) -> None:
    """Follow `partitions` as this instance hosts them, from `cursor`, replaying up to
    `max_pending` batches of a partition (`app.subscribe`'s). `may_serve(partition)`,
    asked every `ELIGIBILITY_CHECK_S`: False ends the upstream for the merge to resume
    elsewhere (a replica still following its changelog after a rebalance demoted it, for
    a stream that asked for running actives, or one fallen behind its `acceptable_lag`)."""
    try:
        subscription = await run_in_threadpool(  # a snapshot reads the store: off the loop
            lambda: app.subscribe(
                store,
                **filters,
                partitions=partitions,
                from_cursor=cursor,
                max_pending=max_pending,
            )
        )
    except IqstateError as error:  # not hosted here any more, or the application stopping
        sink(Ended(partitions, str(error)))
        return
    stopped: list[str] = []
    watch = (
        None
        if may_serve is None
        else asyncio.get_running_loop().create_task(
            _while_eligible(partitions, may_serve, subscription, stopped)
        )
    )
    try:
        sink(Following(partitions))
        async for batch in subscription:
            data = json_bytes(batch_json(batch)).decode()
            event = Event(
                batch.partition, progress_of(batch.cursor, batch.partition), batch.snapshot, data
            )
            if not sink(event):
                return
        sink(Ended(partitions, stopped[0] if stopped else "the subscription closed"))
    except SubscriptionLaggedError as error:
        sink(Lagged(error.reason))
    except SubscriptionEndedError as error:
        sink(Ended(partitions, error.reason))
    except Exception as error:  # a bug: its partitions end (logged), the stream never hangs
        logger.exception("following partitions %s of store %r here failed", partitions, store)
        sink(Ended(partitions, f"following them here failed: {error_text(error)}"))
    finally:
        if watch is not None:
            watch.cancel()
        subscription.close()


async def _while_eligible(
    partitions: tuple[int, ...],
    may_serve: Callable[[int], bool],
    subscription: Subscription,
    stopped: list[str],
) -> None:
    """Close `subscription` once a partition may no longer be served here, saying why in
    `stopped`."""
    while True:
        await asyncio.sleep(ELIGIBILITY_CHECK_S)
        gone = [partition for partition in partitions if not may_serve(partition)]
        if gone:
            stopped.append(
                f"partition(s) {gone} may no longer serve this stream here (no longer the "
                "running active, or behind the acceptable lag)"
            )
            subscription.close()
            return


async def follow_remote(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    partitions: tuple[int, ...],
    sink: Sink,
) -> None:
    """Follow `partitions` through the stream at `url` (another instance's, one hop)."""
    host = httpx.URL(url).netloc.decode()
    try:
        async with aconnect_sse(
            http, "GET", url, headers={**headers, FORWARDED_HEADER: "1"}
        ) as source:
            if source.response.status_code != 200:
                body = await source.response.aread()
                sink(Ended(partitions, f"instance {host} refused: {_message(body)}"))
                return
            sink(Following(partitions))
            async for sse in source.aiter_sse():
                if not sse.data:  # a keep-alive comment (the decoder repeats the last id)
                    continue
                if sse.event == END_EVENT:
                    end = json.loads(sse.data)
                    if end.get("reason") == LAGGED:
                        sink(Lagged(str(end.get("message"))))
                    else:
                        message = f"instance {host}: {end.get('message')}"
                        sink(Ended(partitions, message, served=end.get("no_replica") is not True))
                    return
                body = json.loads(sse.data)
                partition = int(body["partition"])
                event = Event(
                    partition, progress_of(sse.id, partition), body["snapshot"] is True, sse.data
                )
                if not sink(event):
                    return
        sink(Ended(partitions, f"instance {host} closed the stream"))
    except (httpx.HTTPError, SSEError, ValueError, KeyError, TypeError) as error:
        sink(Ended(partitions, f"instance {host} went away ({error_text(error)})"))


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
