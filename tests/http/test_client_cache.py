"""The routing client keeps the cluster's layout (SPEC 8.3): one request per keyed query in
the steady state, refreshed when the layout moves; `range()` pages a store in key order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
from iqstate_http import AsyncRemoteQueryClient, RangeLimits, RemoteQueryClient
from two_instances import PARTITIONS, ROWS, layout, two_instances

from iqstate import KeyQuery, RangeQuery, StateQueryRequest


class CountingTransport(httpx.HTTPTransport):
    """httpx's transport, recording the path of every request sent."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


class AsyncCountingTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await super().handle_async_request(request)


def lookup(key: str) -> StateQueryRequest[int]:
    return StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))


def test_one_request_per_key_lookup_in_the_steady_state(tmp_path: Path) -> None:
    keys = list(ROWS)[:50]
    with two_instances(tmp_path) as (a, _):
        transport = CountingTransport()
        with RemoteQueryClient(a.url, metadata_max_age=60, transport=transport) as client:
            client.query(lookup(keys[0]))  # reads the layout once
            transport.paths.clear()
            for key in keys:
                found = client.query(lookup(key)).only_partition_result()
                assert found is not None and found.result == ROWS[key]
            assert len(transport.paths) == len(keys), transport.paths
            assert all(path.startswith("/v1/stores/counts/keys/") for path in transport.paths)
            # A session's bounded queries go by POST /v1/query: still one request each.
            transport.paths.clear()
            session = client.session()
            for key in keys[:10]:
                assert session.query(lookup(key)).only_partition_result().result == ROWS[key]  # type: ignore[union-attr]
            assert len(transport.paths) == 10 and transport.paths[-1] == "/v1/query"
            absent = client.query(lookup("no-such-key"))
            assert absent.only_partition_result() is None
            assert all(r.is_success for r in absent.partition_results.values())


def test_the_async_client_shares_the_logic(tmp_path: Path) -> None:
    keys = list(ROWS)[:30]

    async def scenario(url: str) -> None:
        transport = AsyncCountingTransport()
        async with AsyncRemoteQueryClient(url, metadata_max_age=60, transport=transport) as client:
            await client.query(lookup(keys[0]))
            transport.paths.clear()
            answers = await asyncio.gather(*(client.query(lookup(k)) for k in keys))
            for key, answer in zip(keys, answers, strict=True):
                found = answer.only_partition_result()
                assert found is not None and found.result == ROWS[key]
            assert len(transport.paths) == len(keys)
            rows = [(k, v) async for k, v in client.range("counts", page_size=70)]
            assert rows == sorted(ROWS.items())
            everything = await client.query(
                StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
            )
            assert sorted(everything.partition_results) == list(range(PARTITIONS))

    with two_instances(tmp_path) as (a, _):
        asyncio.run(scenario(a.url))


def test_range_pages_a_store_in_key_order(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, _):
        with RemoteQueryClient(a.url) as client:
            assert list(client.range("counts", page_size=64)) == sorted(ROWS.items())
            down = list(client.range("counts", "key-0010", "key-0200", order="descending"))
            assert down == sorted(
                ((k, v) for k, v in ROWS.items() if "key-0010" <= k <= "key-0200"), reverse=True
            )
            assert list(client.range("counts", "zzz")) == []


def test_a_stale_layout_costs_a_hop_not_a_wrong_answer(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, b):
        transport = CountingTransport()
        with RemoteQueryClient(b.url, metadata_max_age=60, transport=transport) as client:
            client.query(lookup("key-0000"))
            swapped = layout(b.host, a.host)  # B is now the active of the even partitions
            for instance in (a, b):
                instance.assignment.rebalance(swapped)
            transport.paths.clear()
            keys = list(ROWS)[:40]
            for key in keys:
                found = client.query(lookup(key)).only_partition_result()
                assert found is not None and found.result == ROWS[key]
            # Sent to the old active, forwarded, seen as moved: the layout was read again.
            assert "/v1/metadata" in transport.paths
            transport.paths.clear()
            for key in keys:
                client.query(lookup(key))
            assert len(transport.paths) == len(keys), transport.paths


def test_range_waits_out_a_busy_instance(tmp_path: Path) -> None:
    """Pages an instance is too busy for (503 with Retry-After) are asked again: every
    paging caller gets the whole store, in order, once."""
    limits = RangeLimits(max_active=1, max_waiting=0, wait_timeout=0.1)
    with two_instances(tmp_path, range_limits=limits) as (a, _):
        results: list[list[tuple[str, int]]] = []

        def page_through() -> None:
            with RemoteQueryClient(a.url) as client:
                results.append(list(client.range("counts", page_size=50)))

        threads = [threading.Thread(target=page_through) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [sorted(ROWS.items())] * 6


def test_keys_a_url_would_change_are_looked_up_as_themselves(tmp_path: Path) -> None:
    """Dot segments, slashes, query and fragment marks, escapes: each key is its own."""
    rows = {key: i for i, key in enumerate([".", "..", "", "a/b", "/", "?x=1", "#", "%2E", " "])}
    with two_instances(tmp_path, rows=rows) as (a, _):
        with RemoteQueryClient(a.url) as client:
            for key, value in rows.items():
                found = client.query(lookup(key)).only_partition_result()
                assert found is not None and found.result == value, key


def test_an_instance_that_cannot_answer_fails_the_keys_partition_not_answers_absent(
    tmp_path: Path,
) -> None:
    """A keyed query the client posts (here `require_active`) to an instance that answers
    503 (its application stopped under a running server) fails the key's partition; it used
    to come back as an empty success, which reads as an absent key."""
    from iqstate_http import start_background

    from iqstate import Application, FailureReason

    app = Application("stopped", tmp_path)
    app.key_value_store("counts", 3, value_serde="int64")
    app.start()
    with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
        batch.put("counts", "kafka", 5)
    server = start_background(app)
    try:
        with RemoteQueryClient(server.url) as client:
            request = lookup("kafka").require_active()
            assert client.query(request).only_partition_result().result == 5  # type: ignore[union-attr]
            app.close()
            answer = client.query(request).partition_results
            assert list(answer) == [app.stores["counts"].partition_of("kafka", b"kafka")]
            (failed,) = answer.values()
            assert failed.is_failure and failed.failure_reason is FailureReason.NOT_PRESENT
            assert "has been stopped" in failed.failure_message
    finally:
        server.stop()
