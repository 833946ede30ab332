"""What `RemoteQueryClient.subscribe` and its asyncio twin do, without doing any I/O (SPEC 12).

A remote subscription reads one instance's `/v1/stores/{store}/changes` (any instance
serves every partition), first the one the client was given. When that stream breaks (the
instance went away, or ended it with `unavailable`) it connects to another instance with
`Last-Event-ID` set to the last event's cursor, so every partition continues from where
it was. It never goes back in time: a batch at or before what it already had of a
partition is dropped (a replica that is behind replays it), and it never skips, because
the instances send a snapshot (`snapshot=True`) where they cannot replay. A subscriber
that fell behind gets `SubscriptionLaggedError` with the cursor to resume from, as in
process; one that finds no instance for `reconnect_timeout` seconds gets
`SubscriptionEndedError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from iqstate import ChangeBatch, SubscriptionEndedError, SubscriptionLaggedError
from iqstate.subscriptions.cursor import Cursor, Progress
from iqstate_http.change_events import already_past, batch_from_json
from iqstate_http.change_upstreams import END_EVENT, LAGGED
from iqstate_http.client_plan import REFUSALS, ClientLogic, Plan
from iqstate_http.codecs import path_segment
from iqstate_http.outage import Outage

STREAM_SILENCE = 60.0
"""Seconds without a byte (instances ping idle streams every 15 s) before a stream is
taken for broken."""
RETRY_INTERVAL = 0.5
"""Seconds between tries to reconnect."""


class RefusedSubscription(ValueError):
    """An instance refused the subscription for a reason another would share (a bad key
    or cursor, an unknown store, a wrong token): `status` and the instance's message."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url} refused the subscription (HTTP {status}): {message}")
        self.status = status


class RemoteSubscriptionLogic:
    """One remote subscription's state: where to connect next, its cursor, and each
    partition's progress (see the module doc)."""

    def __init__(
        self,
        logic: ClientLogic,
        store: str,
        filters: dict[str, Any],
        from_cursor: str | None,
        partitions: Iterable[int] | None,
        acceptable_lag: int | None,
        max_pending: int | None,
        reconnect_timeout: float,
    ) -> None:
        given = [name for name, value in filters.items() if value is not None]
        if "key" in given and len(given) > 1:
            raise ValueError("subscribe: key= follows one key; it cannot be combined with others")
        if "prefix" in given and len(given) > 1:
            raise ValueError("subscribe: prefix= cannot be combined with lower= or upper=")
        self._logic, self.store, self._filters = logic, store, filters
        self._extra: dict[str, str] = {}
        if partitions is not None:
            self._extra["partitions"] = ",".join(str(int(p)) for p in partitions)
        if acceptable_lag is not None:
            self._extra["acceptable_lag"] = str(int(acceptable_lag))
        if max_pending is not None:
            self._extra["max_pending"] = str(int(max_pending))
        self.cursor = from_cursor
        """The cursor after the last batch yielded (the `from_cursor` before the first)."""
        self._progress: dict[int, Progress] = {}
        if from_cursor is not None:
            self._progress = dict(Cursor.parse(from_cursor).progress)
        self._timeout = reconnect_timeout
        self._target: str | None = None
        self._failed: str | None = None
        self._outage = Outage()

    def connect(self) -> Plan:
        """The plan of the next connection: `(url, headers)`."""
        view = yield from self._logic.current_view()
        if self._target is None:
            target = self._logic.seeds[0] if self._failed is None else None
            self._target = target or self._logic.any_instance(avoid=self._failed)
        parts = [f"{name}={path_segment(value)}" for name, value in self._extra.items()]
        info = view.stores.get(self.store)
        for name, value in self._filters.items():
            if value is None:
                continue
            text = None if info is None else info.key_path(value)
            if text is None:
                raise ValueError(
                    f"subscribe to store {self.store!r}: {name}={value!r} has no form this "
                    "client can send (an unknown store, or a key its key serde does not take)"
                )
            parts.append(f"{name}={text}")
        url = f"{self._target}/v1/stores/{path_segment(self.store)}/changes"
        headers = {} if self.cursor is None else {"last-event-id": self.cursor}
        return (f"{url}?{'&'.join(parts)}" if parts else url), headers

    def refused(self, status: int, body: bytes) -> float:
        """A connection answered `status` instead of a stream: the wait before the next
        try (an instance that cannot serve now), or `RefusedSubscription` (bad input)."""
        try:
            message = str(json.loads(body)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = body[:200].decode(errors="replace")
        if status in REFUSALS:
            raise RefusedSubscription(str(self._target), status, message)
        return self.broke(f"HTTP {status}: {message}")

    def opened(self) -> None:
        """A stream opened: an instance serves the subscription from now on (the outage,
        if any, pauses)."""
        self._outage.opened(time.monotonic())

    def broke(self, reason: str, *, served: bool = True) -> float:
        """The stream broke (or never came): the wait before connecting to another
        instance; `SubscriptionEndedError` once the subscription has gone unserved for
        `reconnect_timeout`: time without an open stream, and the time of a stream an
        instance ended having found no replica for it (`served=False`). A stream that
        served (a quiet subscription sends no event) ends the outage before it."""
        now = time.monotonic()
        self._outage.broke(now, served=served)
        if self._outage.unserved_s(now) > self._timeout:
            raise SubscriptionEndedError(
                f"no instance served the subscription for {self._timeout:g} s: {reason}",
                self.cursor,
            )
        self._logic.moved()
        self._failed, self._target = self._target, None
        return RETRY_INTERVAL

    def event(self, name: str, data: str, event_id: str) -> ChangeBatch | None:
        """What an event brings: a batch to yield, or None (a batch had already);
        `StreamEnded` for an end that calls for another instance, `SubscriptionLaggedError`
        for a subscriber that fell behind."""
        if not data:  # a keep-alive comment (the decoder repeats the last id)
            return None
        if name == END_EVENT:
            end = json.loads(data)
            if end.get("reason") == LAGGED:
                raise SubscriptionLaggedError(str(end.get("message")), self.cursor)
            raise StreamEnded(str(end.get("message")), no_replica=end.get("no_replica") is True)
        body = json.loads(data)
        partition = int(body["partition"])
        got = Cursor.parse(event_id).progress[partition]
        self._outage.served()
        if already_past(self._progress, partition, got, body["snapshot"] is True):
            return None
        self._progress[partition] = got
        self.cursor = event_id
        return batch_from_json(body, event_id)


class StreamEnded(Exception):
    """The instance ended the stream for a reason another instance may not share;
    `no_replica`: it had found no replica to follow a partition (so it served nothing
    lately, however long it was open)."""

    def __init__(self, message: str, *, no_replica: bool = False) -> None:
        super().__init__(message)
        self.no_replica = no_replica
