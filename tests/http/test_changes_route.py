"""`GET /v1/stores/{store}/changes` through the real service (uvicorn on a free port): Server-
Sent Events with a cursor as each id, resume by `Last-Event-ID` or `cursor`, the token, bad
input, keep-alive pings, a slow client disconnected with a reason, and
`RemoteQueryClient.subscribe` (sync and async) giving what `app.subscribe` gives."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse
from iqstate_http import (
    AsyncRemoteQueryClient,
    RefusedSubscription,
    RemoteQueryClient,
    start_background,
)
from iqstate_http.change_stream import StreamSettings

from iqstate import Application, ChangeBatch, SubscriptionLaggedError
from iqstate.runtime import partition_for_bytes


@contextmanager
def served(app: Application, **options: Any) -> Iterator[str]:
    server = start_background(app, **options)
    try:
        yield server.url
    finally:
        server.stop()


@contextmanager
def stream(
    url: str, path: str, headers: dict[str, str] | None = None
) -> Iterator[Iterator[ServerSentEvent]]:
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=20)) as http,
        connect_sse(http, "GET", path, headers=headers or {}) as source,
    ):
        assert source.response.status_code == 200, source.response.read()
        yield source.iter_sse()


def take(events: Iterator[ServerSentEvent], count: int) -> list[ServerSentEvent]:
    return [next(events) for _ in range(count)]


def write(app: Application, batch_id: int, rows: dict[str, int]) -> None:
    """Batch `batch_id` (the fixture wrote 1, at offset 7) at offset `batch_id + 6`."""
    with app.begin_batch(position={"words": {0: batch_id + 6}}, batch_id=batch_id) as batch:
        batch.put_all("counts", list(rows.items()))


def test_a_snapshot_per_partition_then_each_batch_with_a_cursor_that_resumes(
    app: Application,
) -> None:
    with served(app) as url, stream(url, "/v1/stores/counts/changes") as events:
        snapshots = take(events, 3)
        bodies = [json.loads(event.data) for event in snapshots]
        assert sorted(body["partition"] for body in bodies) == [0, 1, 2]
        assert all(body["snapshot"] and body["position"] == {"words": {"0": 7}} for body in bodies)
        held = {c["key"]: c["value"] for body in bodies for c in body["changes"]}
        assert held == {"spark": 3, "kafka": 5, "flink": 1}
        write(app, 2, {"spark": 4})
        (change,) = take(events, 1)
        body = json.loads(change.data)
        assert body == {
            "partition": partition_for_bytes(b"spark", 3),
            "position": {"words": {"0": 8}},
            "snapshot": False,
            "changes": [{"key": "spark", "value": 4}],
        }
        assert change.event == "message" and change.id.startswith("iqc1.")
        resume_at = change.id

    write(app, 3, {"kafka": 6})
    write(app, 4, {"flink": 2, "spark": 5})
    expected = [
        (partition_for_bytes(b"kafka", 3), [{"key": "kafka", "value": 6}]),
        (partition_for_bytes(b"flink", 3), [{"key": "flink", "value": 2}]),
        (partition_for_bytes(b"spark", 3), [{"key": "spark", "value": 5}]),
    ]
    with served(app) as url:
        # On another server, by header and by query parameter: the batches after the
        # cursor, no snapshot, in commit order (flink and spark may share a partition).
        for how in ({"headers": {"Last-Event-ID": resume_at}}, {"query": resume_at}):
            path = "/v1/stores/counts/changes"
            if "query" in how:
                path += f"?cursor={resume_at}"
            with stream(url, path, how.get("headers")) as events:
                got: list[tuple[int, list[dict[str, Any]]]] = []
                while sum(len(changes) for _, changes in got) < 3:
                    body = json.loads(next(events).data)
                    assert not body["snapshot"]
                    got.append((body["partition"], body["changes"]))
                flat = [(p, c) for p, changes in got for c in changes]
                assert flat == [(p, c) for p, changes in expected for c in changes]


def test_keys_values_and_windows_in_each_stores_json_form(app: Application) -> None:
    with served(app) as url:
        with stream(url, "/v1/stores/raw/changes?key=" + "AP8%3D") as events:
            (event,) = take(events, 1)
            assert json.loads(event.data)["changes"] == [
                {"key": base64.b64encode(b"\x00\xff").decode(), "value": "binary"}
            ]
        with stream(url, "/v1/stores/by-id/changes?key=42") as events:
            (event,) = take(events, 1)
            assert json.loads(event.data)["changes"] == [{"key": 42, "value": {"name": "answer"}}]
        with stream(url, '/v1/stores/docs/changes?key={"id":[1,2]}') as events:
            (event,) = take(events, 1)
            changes = json.loads(event.data)["changes"]
            assert changes == [{"key": {"id": [1, 2]}, "value": "a document"}]
        with stream(url, "/v1/stores/per-minute/changes?key=spark") as events:
            (event,) = take(events, 1)
            assert json.loads(event.data)["changes"] == [
                {"key": "spark", "value": 2, "start": 60_000, "end": 120_000}
            ]
        with stream(url, "/v1/stores/counts/changes?prefix=sp") as events:
            snapshots = [json.loads(event.data) for event in take(events, 3)]
            assert [c for s in snapshots for c in s["changes"]] == [{"key": "spark", "value": 3}]


def test_every_store_type_as_app_subscribe_gives_it(tmp_path: Path) -> None:
    app = Application("types", tmp_path)
    app.timestamped_key_value_store("prices", 2, value_serde="int64")
    app.versioned_key_value_store("profiles", 2, 3_600_000, value_serde="int64")
    app.session_store("visits", 2, 3_600_000, value_serde="int64")
    app.window_store("per-minute", 2, 60_000, 3_600_000, value_serde="int64")
    app.key_value_store("counts", 2, value_serde="int64")
    with app:
        with app.begin_batch(position={"feed": {0: 1}}, batch_id=1) as batch:
            batch.put("prices", "apple", 3, timestamp=1000)
            batch.put("profiles", "ann", 1, timestamp=100)
            batch.put("visits", "ann", 7, session=(10, 20))
            batch.put("per-minute", "spark", 2, window_start=60_000)
            batch.put("counts", "a", 1)
        with served(app) as url, RemoteQueryClient(url) as client:
            for batch_id, store in enumerate(STORES, start=2):
                local = app.subscribe(store)
                remote = client.subscribe(store)
                try:
                    snapshots = [next(local), next(local)]
                    remote_snapshots = [next(remote), next(remote)]
                    assert sorted(map(comparable, remote_snapshots)) == sorted(
                        map(comparable, snapshots)
                    ), store
                    with app.begin_batch(
                        position={"feed": {0: batch_id}}, batch_id=batch_id
                    ) as batch:
                        STORES[store](batch)
                    assert comparable(next(remote)) == comparable(next(local)), store
                finally:
                    local.close()
                    remote.close()


STORES: dict[str, Any] = {
    "prices": lambda batch: batch.put("prices", "apple", 4, timestamp=2000),
    "profiles": lambda batch: (
        batch.put("profiles", "ann", 2, timestamp=200),
        batch.delete("profiles", "ann", timestamp=300),
    ),
    "visits": lambda batch: batch.put("visits", "bob", 8, session=(30, 40)),
    "per-minute": lambda batch: batch.put("per-minute", "spark", 5, window_start=120_000),
    "counts": lambda batch: batch.delete("counts", "a"),
}
"""What each store's second batch writes: a put, a versioned delete, a session, a window,
a delete."""


def comparable(batch: ChangeBatch) -> tuple[Any, ...]:
    return (
        batch.partition,
        batch.position,
        batch.snapshot,
        [(c.key, c.value, c.window, c.timestamp) for c in batch.changes],
    )


def test_the_token_is_required(app: Application) -> None:
    with served(app, token="s3cret") as url:
        refused = httpx.get(url + "/v1/stores/counts/changes", timeout=10)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        wrong = httpx.get(
            url + "/v1/stores/counts/changes", headers={"Authorization": "Bearer no"}, timeout=10
        )
        assert wrong.status_code == 401
        with stream(url, "/v1/stores/counts/changes", {"Authorization": "Bearer s3cret"}) as ev:
            assert len(take(ev, 3)) == 3
        with RemoteQueryClient(url, token="s3cret") as client:
            assert next(client.subscribe("counts", key="spark")).changes[0].value == 3
        with RemoteQueryClient(url) as client, pytest.raises(ValueError, match="401"):
            next(client.subscribe("counts"))


@pytest.mark.parametrize(
    ("path", "status", "code", "named"),
    [
        ("/v1/stores/nope/changes", 404, "unknown_store", "nope"),
        ("/v1/stores/counts/changes?key=a&lower=b", 400, "bad_request", "key="),
        ("/v1/stores/counts/changes?prefix=a&upper=b", 400, "bad_request", "prefix="),
        ("/v1/stores/counts/changes?cursor=iqc1.bad.0", 400, "invalid_cursor", "cursor"),
        ("/v1/stores/counts/changes?cursor=hello", 400, "invalid_cursor", "hello"),
        ("/v1/stores/counts/changes?keys=a", 400, "bad_request", "keys"),
        ("/v1/stores/counts/changes?key=a&key=b", 400, "bad_request", "more than once"),
        ("/v1/stores/by-id/changes?key=abc", 400, "bad_request", "int"),
        ("/v1/stores/counts/changes?partitions=7", 400, "bad_request", "partition 7"),
        ("/v1/stores/counts/changes?max_pending=0", 400, "bad_request", "from 1 to 100000"),
        ("/v1/stores/counts/changes?max_pending=x", 400, "bad_request", "from 1 to 100000"),
    ],
)
def test_bad_input_is_a_clear_error_before_any_event(
    client: httpx.Client, path: str, status: int, code: str, named: str
) -> None:
    answer = client.get(path)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert named in answer.json()["error"]["message"]


def test_a_cursor_of_another_filter_or_store_is_refused(app: Application) -> None:
    with served(app) as url:
        with stream(url, "/v1/stores/counts/changes?key=spark") as events:
            cursor = next(events).id
        for path in ("/v1/stores/counts/changes", "/v1/stores/by-id/changes"):
            answer = httpx.get(url + path, headers={"Last-Event-ID": cursor}, timeout=10)
            assert answer.status_code == 400
            assert answer.json()["error"]["code"] == "invalid_cursor"
            assert "belongs to another" in answer.json()["error"]["message"]
        with RemoteQueryClient(url) as client, pytest.raises(RefusedSubscription) as refusal:
            next(client.subscribe("by-id", from_cursor=cursor))
        assert refusal.value.status == 400 and "belongs to another store" in str(refusal.value)


def test_idle_streams_get_keep_alive_comments(app: Application) -> None:
    with (
        served(app, change_streams=StreamSettings(ping_interval=0.2)) as url,
        httpx.Client(base_url=url, timeout=10) as http,
        http.stream("GET", "/v1/stores/counts/changes?key=spark") as response,
    ):
        lines = response.iter_lines()
        comments = 0
        for line in lines:
            comments += line.startswith(":")
            if comments == 3:
                break
        assert comments == 3


RAW_KEY = "AP8%3D"
"""b"\\x00\\xff" of the `raw` store, as a query parameter."""


def write_big(app: Application, first: int, count: int) -> None:
    """`count` batches of `raw`, each a 200 kB value: far more than the socket buffers
    hold between a server and a client that reads nothing."""
    for batch_id in range(first, first + count):
        with app.begin_batch(position={"words": {0: batch_id}}, batch_id=batch_id) as batch:
            batch.put("raw", b"\x00\xff", str(batch_id).ljust(200_000))


def test_a_slow_client_is_disconnected_with_the_reason_and_resumes(app: Application) -> None:
    with served(app) as url:
        with stream(url, f"/v1/stores/raw/changes?key={RAW_KEY}&max_pending=4") as events:
            received = take(events, 1)
            write_big(app, 2, 200)
            received.extend(events)
        end = received[-1]
        assert end.event == "end"
        body = json.loads(end.data)
        # behind by more than max_pending events, or by more than the partition's replay
        # buffer holds (200 batches of 200 kB are 40 MB): which comes first is timing
        assert body["reason"] == "lagged" and "fell behind" in body["message"]
        assert body["cursor"] == end.id == received[-2].id
        values = [int(json.loads(e.data)["changes"][0]["value"]) for e in received[1:-1]]
        assert values == list(range(2, 2 + len(values))) and len(values) < 200
        with stream(url, f"/v1/stores/raw/changes?key={RAW_KEY}", {"Last-Event-ID": end.id}) as ev:
            first = json.loads(next(ev).data)
            resumed = int(first["changes"][0]["value"])
            assert resumed == 201 if first["snapshot"] else resumed == 2 + len(values)


def test_max_pending_counts_each_partitions_events_and_bounds_a_replay(
    app: Application,
) -> None:
    """As `app.subscribe` counts it: `max_pending=1` over three partitions takes their
    three snapshots (it used to end with `lagged` at the second), and a resume with
    `max_pending=1000` replays 300 batches where the default (256) starts over."""
    with served(app) as url:
        with stream(url, "/v1/stores/counts/changes?max_pending=1") as events:
            snapshots = take(events, 3)
        assert [json.loads(e.data)["snapshot"] for e in snapshots] == [True, True, True]
        path = "/v1/stores/counts/changes?key=kafka&max_pending=1000"
        with stream(url, path) as events:
            (start,) = take(events, 1)  # a live subscriber: the partition keeps a replay buffer
            for batch_id in range(2, 302):
                write(app, batch_id, {"kafka": batch_id})
        for asked, replayed in ((path, True), ("/v1/stores/counts/changes?key=kafka", False)):
            with stream(url, asked, {"Last-Event-ID": start.id}) as events:
                first = json.loads(next(events).data)
            assert first["snapshot"] is not replayed
            assert first["changes"][0]["value"] == (2 if replayed else 301)


def test_the_client_follows_a_key_and_resumes_from_its_cursor(app: Application) -> None:
    with served(app) as url, RemoteQueryClient(url) as client:
        subscription = client.subscribe("counts", key="kafka")
        first = next(subscription)
        assert first.snapshot and [(c.key, c.value) for c in first.changes] == [("kafka", 5)]
        write(app, 2, {"kafka": 6, "spark": 9})
        second = next(subscription)
        assert not second.snapshot and [(c.key, c.value) for c in second.changes] == [("kafka", 6)]
        assert subscription.cursor == second.cursor
        subscription.close()
        write(app, 3, {"kafka": 7})
        with client.subscribe("counts", key="kafka", from_cursor=second.cursor) as resumed:
            third = next(resumed)
            assert not third.snapshot and third.changes[0].value == 7


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_client_rides_out_a_restart_of_its_only_instance(
    app: Application, asynchronous: bool
) -> None:
    """The instance stops and comes back on its address a second later: the subscription
    reconnects (within `reconnect_timeout`) and goes on from its cursor, without a
    snapshot; it used to raise `ConnectionError` when discovery found no instance."""
    server = start_background(app)
    port = int(server.url.rsplit(":", 1)[1])
    restarted: list[Any] = []

    def restart() -> None:
        server.stop()
        time.sleep(1.5)
        restarted.append(start_background(app, port=port))
        write(app, 2, {"kafka": 6})

    async def follow_async() -> tuple[ChangeBatch, ChangeBatch]:
        async with AsyncRemoteQueryClient(server.url) as client:
            subscription = client.subscribe("counts", key="kafka", reconnect_timeout=30)
            first = await anext(subscription)
            threading.Thread(target=restart, daemon=True).start()
            second = await anext(subscription)
            await subscription.aclose()
            return first, second

    def follow() -> tuple[ChangeBatch, ChangeBatch]:
        with (
            RemoteQueryClient(server.url) as client,
            client.subscribe("counts", key="kafka", reconnect_timeout=30) as subscription,
        ):
            first = next(subscription)
            threading.Thread(target=restart, daemon=True).start()
            return first, next(subscription)

    try:
        first, second = asyncio.run(follow_async()) if asynchronous else follow()
    finally:
        for again in restarted:
            again.stop()
    assert first.snapshot and first.changes[0].value == 5
    assert not second.snapshot and [(c.key, c.value) for c in second.changes] == [("kafka", 6)]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_quiet_subscription_rides_out_failovers_further_apart_than_its_timeout(
    app: Application, asynchronous: bool
) -> None:
    """A key that does not change sends no event: after riding out one restart, the
    subscription is served, quietly, for longer than `reconnect_timeout`, and rides out
    the next restart too (it used to give up at once, timing the outage from the first)."""
    server = start_background(app)
    port = int(server.url.rsplit(":", 1)[1])
    servers = [server]

    def restart_twice() -> None:
        for _ in range(2):
            servers[-1].stop()
            time.sleep(0.5)
            servers.append(start_background(app, port=port))
            time.sleep(3)  # served longer than reconnect_timeout, with nothing to send
        write(app, 2, {"kafka": 6})

    async def follow_async() -> ChangeBatch:
        async with AsyncRemoteQueryClient(server.url) as client:
            subscription = client.subscribe("counts", key="kafka", reconnect_timeout=2)
            assert (await anext(subscription)).snapshot
            threading.Thread(target=restart_twice, daemon=True).start()
            batch = await anext(subscription)
            await subscription.aclose()
            return batch

    def follow() -> ChangeBatch:
        with (
            RemoteQueryClient(server.url) as client,
            client.subscribe("counts", key="kafka", reconnect_timeout=2) as subscription,
        ):
            assert next(subscription).snapshot
            threading.Thread(target=restart_twice, daemon=True).start()
            return next(subscription)

    try:
        batch = asyncio.run(follow_async()) if asynchronous else follow()
    finally:
        for each in servers:
            each.stop()
    assert not batch.snapshot and [(c.key, c.value) for c in batch.changes] == [("kafka", 6)]


def test_the_async_client_follows_a_store(app: Application) -> None:
    with served(app) as url:

        async def follow() -> list[ChangeBatch]:
            async with AsyncRemoteQueryClient(url) as client:
                subscription = client.subscribe("by-id")
                got = [await anext(subscription), await anext(subscription)]
                await asyncio.to_thread(write_by_id)
                got.append(await anext(subscription))
                await subscription.aclose()
                return got

        def write_by_id() -> None:
            with app.begin_batch(position={"words": {0: 2}}, batch_id=2) as batch:
                batch.put("by-id", 42, {"name": "changed"})

        snapshots, change = (lambda got: (got[:2], got[2]))(asyncio.run(follow()))
        assert all(batch.snapshot for batch in snapshots)
        assert [(c.key, c.value) for c in change.changes] == [(42, {"name": "changed"})]


def test_a_lagged_client_raises_with_the_cursor(app: Application) -> None:
    with served(app) as url, RemoteQueryClient(url) as client:
        subscription = client.subscribe("raw", key=b"\x00\xff", max_pending=2)
        assert next(subscription).snapshot  # the partition as it is, before the writes
        write_big(app, 2, 200)
        with pytest.raises(SubscriptionLaggedError) as lagged:
            for _ in subscription:
                pass
        # past max_pending, or past the partition's replay buffer (40 MB written against its
        # 8 MiB), whichever the timing brings first: either way a cursor to resume from
        assert "fell behind" in lagged.value.reason
        assert lagged.value.cursor is not None
        resumed = client.subscribe("raw", key=b"\x00\xff", from_cursor=lagged.value.cursor)
        assert int(next(resumed).changes[0].value) >= 2  # one of the batches written


def test_a_stream_ends_with_its_reason_and_cursor_when_the_server_stops(
    app: Application,
) -> None:
    """Stopping the server (SIGTERM under `iqstate serve`) ends every open stream with a
    final `unavailable` event and the cursor, so a client knows to resume elsewhere; the
    streams used to be cut without one, and the stop waited for them first."""
    server = start_background(app)
    with stream(server.url, "/v1/stores/counts/changes?key=spark") as events:
        (snapshot,) = take(events, 1)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        rest = list(events)
        stopping.join()
    assert [event.event for event in rest] == ["end"]
    body = json.loads(rest[0].data)
    assert body["reason"] == "unavailable" and "shutting down" in body["message"]
    assert body["cursor"] == rest[0].id == snapshot.id
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/v1/stores", timeout=2)


def test_a_stream_whose_application_stops_ends_with_its_reason(app: Application) -> None:
    """The application closing under a served stream ends the subscription; the stream
    then ends with `unavailable` and the cursor, never hanging on keep-alive pings."""
    settings = StreamSettings(resume_timeout=0.5, retry_interval=0.1, ping_interval=0.2)
    with (
        served(app, change_streams=settings) as url,
        stream(url, "/v1/stores/counts/changes?key=spark") as events,
    ):
        (snapshot,) = take(events, 1)
        app.close()
        final = next(event for event in events if event.event == "end")
        body = json.loads(final.data)
        assert body["reason"] == "unavailable"
        assert body["cursor"] == final.id == snapshot.id


def test_a_partition_served_quietly_for_longer_than_the_timeout_is_followed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The merged stream's rule, with scripted upstreams in place of the replicas: a
    partition is given up once it has gone unserved for `resume_timeout`. An upstream that
    served it, even with nothing to send and however briefly, ends the outage before it;
    one that held it without a replica (one hop away) does not."""
    import iqstate_http.change_stream as change_stream_module
    from iqstate_http.change_stream import ChangeRequest, ChangeStream
    from iqstate_http.change_upstreams import Ended, Event, Following, Sink

    from iqstate.subscriptions.cursor import Cursor, Progress

    class Here:
        host, local = "here:1", True

    class OnlyHere:
        def candidates(self, store: str, partition: int, lag: int | None) -> list[Here]:
            return [Here()]

        def invalidate(self) -> None:
            pass

    settings = StreamSettings(resume_timeout=0.5, retry_interval=0.05, ping_interval=5)
    request = ChangeRequest(
        store="counts", filters={}, filter_query={}, cursor=Cursor("web", "counts", "f"),
        partitions=(0,), acceptable_lag=None, max_pending=256, forwarded=False,
        authorization=None,
    )  # fmt: skip

    def events_of(script: Callable[[int, Sink], Any]) -> list[ServerSentEvent]:
        calls = 0

        async def upstream(*arguments: Any) -> None:
            nonlocal calls
            calls += 1
            await script(calls, arguments[6])  # follow_local's `sink`

        monkeypatch.setattr(change_stream_module, "follow_local", upstream)

        async def collect() -> list[ServerSentEvent]:
            stream = ChangeStream(None, OnlyHere(), None, request, settings)  # type: ignore[arg-type]
            got: list[ServerSentEvent] = []
            async with asyncio.timeout(10):
                async for event in stream.events():
                    got.append(event)
                    if len(got) == 2:
                        break
            return got

        return asyncio.run(collect())

    async def quiet_then_moved(call: int, sink: Sink) -> None:
        if call == 1:  # a snapshot, then the replica goes away
            sink(Following((0,)))
            sink(Event(0, Progress("log", 10), True, json.dumps({"n": 1})))
            sink(Ended((0,), "moved"))
        elif call == 2:  # another serves it, with nothing to send, then goes away
            sink(Following((0,)))
            await asyncio.sleep(1.0)
            sink(Ended((0,), "moved again"))
        else:  # a third has a batch
            sink(Following((0,)))
            sink(Event(0, Progress("log", 12), False, json.dumps({"n": 2})))
            await asyncio.sleep(60)

    got = events_of(quiet_then_moved)
    assert [json.loads(event.data) for event in got] == [{"n": 1}, {"n": 2}]

    async def moved_often(call: int, sink: Sink) -> None:
        sink(Following((0,)))
        if call == 1:
            sink(Event(0, Progress("log", 10), True, json.dumps({"n": 1})))
        if call < 6:  # served 0.2 s at a time, 1 s in all: longer than the timeout
            await asyncio.sleep(0.2)
            sink(Ended((0,), "moved"))
        else:
            sink(Event(0, Progress("log", 12), False, json.dumps({"n": 2})))
            await asyncio.sleep(60)

    got = events_of(moved_often)
    assert [json.loads(event.data) for event in got] == [{"n": 1}, {"n": 2}]

    async def no_replica_one_hop_away(call: int, sink: Sink) -> None:
        if call == 1:
            sink(Event(0, Progress("log", 10), True, json.dumps({"n": 1})))
        sink(Following((0,)))
        sink(Ended((0,), "instance b:1: no replica may serve them now", served=False))

    got = events_of(no_replica_one_hop_away)
    assert got[-1].event == "end"
    assert "found no replica to follow it for 0.5 s" in json.loads(got[-1].data)["message"]


def test_a_local_upstream_ends_once_its_replica_may_no_longer_serve(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that keeps following its changelog after a rebalance demoted it still gets
    every batch, but a stream that asked for running actives (or a bounded lag) must move
    to the replica that may serve it: the local upstream ends, saying why, for the merge to
    resume the partition elsewhere from its cursor."""
    from iqstate_http import change_upstreams
    from iqstate_http.change_upstreams import Ended, Event, Following, Item, follow_local

    monkeypatch.setattr(change_upstreams, "ELIGIBILITY_CHECK_S", 0.02)
    serving = {0: True, 1: True}
    items: list[Item] = []
    cursor = app.subscribe("counts").cursor

    def sink(item: Item) -> bool:
        items.append(item)
        if isinstance(item, Event) and len(items) == 3:
            serving[1] = False  # after the snapshots: partition 1's replica is demoted
        return True

    async def run() -> None:
        async with asyncio.timeout(10):
            await follow_local(
                app, "counts", {}, (0, 1), cursor, 16, sink, lambda partition: serving[partition]
            )

    asyncio.run(run())
    assert isinstance(items[0], Following)
    assert [type(item) for item in items[1:3]] == [Event, Event], "both snapshots first"
    (ended,) = items[3:]
    assert isinstance(ended, Ended) and ended.partitions == (0, 1) and ended.served
    assert "[1] may no longer serve this stream here" in ended.reason
