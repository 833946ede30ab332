"""Any instance answers any request, on a real broker (SPEC 8.1-8.3): three instances, six
partitions, one standby each.

Instance A runs in the test process (it writes the batches); B and C are `iqstate serve
--cluster` processes. Every check goes through plain HTTP or the routing client, as a
service, a dashboard or a load balancer would reach the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import RemoteQueryClient
from serving_support import (
    Instance,
    every_partition_served,
    three_instances,
    wait_for,
)

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.runtime import partition_for_bytes

PARTITIONS = 6
KEYS = [f"word-{i:03d}" for i in range(120)]
FAILOVER_TIMEOUT = 60.0  # generous for a loaded 2-core machine; the bench measures the time


class Counting(httpx.HTTPTransport):
    """httpx's transport, counting the requests sent through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def _status(url: str) -> list[dict[str, Any]]:
    try:
        return list(httpx.get(url + "/v1/cluster", timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return []


def caught_up(urls: list[str]) -> bool:
    """Every instance sees all of `urls` live, with two replicas a partition, all at lag 0."""
    for url in urls:
        live = [s for s in _status(url) if s["live"]]
        replicas = [r for s in live for r in s["replicas"]]
        if len(live) != len(urls) or len(replicas) != 2 * PARTITIONS:
            return False
        if any(r["lag"] != 0 for r in replicas):
            return False
    return True


def write(app: Application, batch_id: int) -> dict[str, int]:
    values = {key: batch_id * 1000 + i for i, key in enumerate(KEYS)}
    with app.begin_batch(position={"events": {0: batch_id}}, batch_id=batch_id) as batch:
        batch.put_all("counts", list(values.items()))
    return values


def get_key(url: str, key: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/stores/counts/keys/{key}", timeout=10)


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/query", json={"store": "counts", **body}, timeout=30)


@pytest.fixture
def cluster_of_three(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[tuple[Application, list[str], list[Instance]]]:
    with three_instances(
        kafka_broker.bootstrap_servers, unique_name("forwarding"), tmp_path, PARTITIONS,
        until_stable=True,
    ) as three:  # fmt: skip
        yield three


@pytest.mark.iqstate_slow
def test_any_instance_answers_any_request_and_survives_a_sigkill(
    cluster_of_three: tuple[Application, list[str], list[Instance]],
) -> None:
    app, urls, others = cluster_of_three
    truth = write(app, 1)
    wait_for("every replica to apply the batch", lambda: caught_up(urls))

    # Every instance answers every key with its true value, absent keys with null.
    for url in urls:
        for key in KEYS:
            answer = get_key(url, key)
            assert answer.status_code == 200, (url, key, answer.text)
            body = answer.json()
            assert body["value"] == truth[key], (url, key, body)
            assert body["partition"] == partition_for_bytes(key.encode(), PARTITIONS)
            assert body["role"] == "RUNNING" and body["position"] == {"events": {"0": 1}}
        absent = get_key(url, "never-written")
        assert absent.status_code == 200 and absent.json()["value"] is None

    # POST /v1/query on any instance covers every partition; scope local stays local.
    for url in urls:
        answer = post(url, {"query": {"type": "range"}}).json()
        assert sorted(answer["partitions"], key=int) == [str(p) for p in range(PARTITIONS)]
        assert {k: v for e in answer["partitions"].values() for k, v in e["value"]} == truth
        assert all(e["role"] == "RUNNING" for e in answer["partitions"].values())
        local = post(url, {"query": {"type": "range"}, "scope": "local"}).json()
        assert 0 < len(local["partitions"]) < PARTITIONS, "each hosts some partitions, not all"
        assert {e["host"] for e in local["partitions"].values()} == {url.removeprefix("http://")}

    # Merged pages in both orders: every key once, in order, cursors sent to other instances.
    for order in ("ascending", "descending"):
        seen: list[str] = []
        cursor = None
        turn = 0
        while True:
            body: dict[str, Any] = {"query": {"type": "range", "order": order}, "merge": True,
                                    "limit": 17, "cursor": cursor}  # fmt: skip
            page = post(urls[turn % len(urls)], body)
            assert page.status_code == 200, page.text
            seen.extend(k for k, _ in page.json()["rows"])
            cursor, turn = page.json()["next"], turn + 1
            if cursor is None:
                break
        assert seen == sorted(KEYS, reverse=order == "descending")

    # The routing client: one request per keyed query in the steady state.
    counting = Counting()
    client = RemoteQueryClient(urls[0], metadata_max_age=3600, transport=counting)
    try:
        lookup = StateQueryRequest.in_store("counts").with_query

        def ask(key: str) -> Any:
            return client.query(lookup(KeyQuery.with_key(key)))

        ask(KEYS[0])
        counting.sent = 0
        for key in KEYS:
            found = ask(key).only_partition_result()
            assert found is not None and found.result == truth[key]
        assert counting.sent == len(KEYS)

        # SIGKILL an instance: every answer on the survivors is the true value or a 503.
        killed = others[1]
        killed.kill()
        survivors = urls[:2]
        outcomes: dict[int, int] = {}
        deadline = time.monotonic() + FAILOVER_TIMEOUT
        while True:
            served = every_partition_served(survivors, PARTITIONS)
            for url in survivors:
                for key in KEYS:
                    answer = get_key(url, key)
                    outcomes[answer.status_code] = outcomes.get(answer.status_code, 0) + 1
                    assert answer.status_code in (200, 503), (url, key, answer.text)
                    if answer.status_code == 200:
                        assert answer.json()["value"] == truth[key], (url, key, answer.text)
                    else:
                        assert answer.json()["error"]["code"] in (
                            "not_active", "not_present", "not_up_to_bound",
                        ), answer.text  # fmt: skip
            for key in KEYS[::7]:  # the client, meanwhile: true values or failures
                result = ask(key)
                for partition_result in result.partition_results.values():
                    if partition_result.is_success:
                        assert partition_result.result == truth[key]
            if served:
                break
            assert time.monotonic() < deadline, f"no failover within {FAILOVER_TIMEOUT} s"
        # Once the survivors serve every partition, every key is answered again.
        wait_for(
            "every key answered by every survivor",
            lambda: all(get_key(u, k).status_code == 200 for u in survivors for k in KEYS),
        )
        latest = write(app, 2)
        wait_for(
            "the survivors to answer the next batch, through any instance",
            lambda: all(
                get_key(u, k).json().get("value") == latest[k] for u in survivors for k in KEYS
            ),
        )
        for key in KEYS:
            found = ask(key).only_partition_result()
            assert found is not None and found.result == latest[key]
        assert outcomes.get(200, 0) > 0
    finally:
        client.close()
