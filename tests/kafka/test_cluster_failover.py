"""Three serving instances on a real broker: roles, standbys, bounds, failover, rejoin.

Instance A runs in the test process (it also writes the batches, through `begin_batch`);
B and C are `iqstate serve --cluster ...` processes. Everything a user checks goes through
the HTTP API and the routing `RemoteQueryClient`.
"""

from __future__ import annotations

import itertools
import shutil
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
    in_process_instance,
    layout,
    roles,
    settled,
    stable,
    wait_for,
)

from iqstate import (
    Application,
    FailureReason,
    KeyQuery,
    Position,
    RangeQuery,
    StateQueryRequest,
)

PARTITIONS = 8
STORE = f"counts:key_value:{PARTITIONS},engine=rocksdb,value_serde=int64"
KEYS = [f"word-{i}" for i in range(64)]
ACCEPTABLE_LAG = 10_000
"""Readers accept standbys this far behind: they answer when an active cannot (KIP-535)."""
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
FAILOVER_TIMEOUT = 30.0  # generous for a loaded 2-core machine; the bench measures the time


@pytest.fixture
def instance_a(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[tuple[Application, str]]:
    with in_process_instance(
        kafka_broker.bootstrap_servers, unique_name("failover"), tmp_path / "a", PARTITIONS
    ) as instance:
        yield instance


@pytest.mark.iqstate_slow
def test_three_instances_fail_over_and_rejoin(
    kafka_broker: Any, instance_a: tuple[Application, str], tmp_path: Path
) -> None:
    app, url_a = instance_a
    others = [
        Instance(kafka_broker.bootstrap_servers, app.application_id, tmp_path / name, STORE)
        for name in ("b", "c")
    ]
    urls = [url_a, *(other.url for other in others)]
    try:
        for other in others:
            other.start()
        wait_for("three instances with one RUNNING active and one standby per partition",
                 lambda: settled(urls, PARTITIONS), timeout=120)  # fmt: skip
        # Warm-up replicas may still hand actives over once caught up: wait until the layout
        # stops changing (the assignment's fixed point) before checking who answers what.
        wait_for("the layout to stop changing", lambda: stable(urls, PARTITIONS), timeout=120)

        for batch_id in range(1, 6):
            with app.begin_batch(position={"events": {0: batch_id}}, batch_id=batch_id) as batch:
                batch.put_all("counts", [(key, batch_id) for key in KEYS])
        last = Position.from_map({"events": {0: 5}})

        # Each partition's standby reaches the batch's position bound.
        for partition, holders in layout(urls, PARTITIONS).items():
            standby = holders["STANDBY"][0]
            wait_for(
                f"partition {partition}'s standby to reach the bound",
                lambda partition=partition, standby=standby: _answers_at(standby, partition, last),
            )
            refused = _post_query(standby, partition, last, require_active=True)
            assert refused.get("failure") == FailureReason.NOT_ACTIVE.name, refused

        # Every instance sees every replica of the cluster, with the lag its host reported:
        # none once the standbys have applied the last batch.
        wait_for("every replica in the cluster to report lag 0",
                 lambda: all(_all_caught_up(url, urls) for url in urls))  # fmt: skip

        # Metadata on every instance agrees with where partitions really are.
        for url in urls:
            metadata = httpx.get(url + "/v1/metadata", timeout=5).json()
            for instance in metadata:
                host = f"http://{instance['host']}:{instance['port']}"
                for partition in instance["active"].get("counts", []):
                    answer = _post_query(host, partition, last, require_active=True)
                    assert answer["ok"], (url, host, partition, answer)

        client = RemoteQueryClient(url_a)
        session = client.session()
        positions: list[Position] = []

        def read_everything() -> None:
            request = StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
            result = session.query(request, acceptable_lag=ACCEPTABLE_LAG)
            for partition, answer in result.partition_results.items():
                if answer.is_failure:
                    assert answer.failure_reason in (
                        FailureReason.NOT_PRESENT,
                        FailureReason.NOT_ACTIVE,
                    ), (partition, answer)
                else:
                    with answer.result as pairs:
                        assert {value for _, value in pairs} <= {5}
            positions.append(result.position)

        read_everything()
        killed = others[1]
        killed.kill()
        survivors = urls[:2]
        deadline = time.monotonic() + FAILOVER_TIMEOUT
        while not every_partition_served(survivors, PARTITIONS):
            read_everything()  # answered by standbys or failed per partition, never raises
            assert time.monotonic() < deadline, f"no failover within {FAILOVER_TIMEOUT} s"
        read_everything()
        # The survivors show the killed instance as down, its replicas gone (moved).
        wait_for("the survivors to show the killed instance as down",
                 lambda: all(_gone(url, killed.url, "silent") for url in survivors))  # fmt: skip
        if Path(CHROMIUM).exists():
            text = _state_browser_instances(url_a)
            assert f"127.0.0.1:{killed.port}" in text and "down: not heard from" in text, text
        assert all(later.dominates(earlier) for earlier, later in itertools.pairwise(positions)), (
            "a monotonic session never reads backwards"
        )

        # Restart it: it warms up and rejoins without any partition going unserved: every
        # read through the routing client is answered for every partition meanwhile.
        killed.start()
        rejoined = time.monotonic() + 120
        while not (
            settled(urls, PARTITIONS) and any(r["role"] == "RUNNING" for r in roles(killed.url))
        ):
            request = StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
            answers = session.query(request, acceptable_lag=ACCEPTABLE_LAG).partition_results
            unserved = sorted(
                (p, answer.failure_reason.name, answer.failure_message[:160])
                for p, answer in answers.items()
                if answer.is_failure
            )
            assert len(answers) == PARTITIONS and not unserved, f"unserved: {unserved}"
            assert time.monotonic() < rejoined, "the restarted instance did not rejoin"
            time.sleep(0.2)
        statuses = client.cluster_status()
        assert sorted(f"http://{s['host']}:{s['port']}" for s in statuses if s["live"]) == sorted(
            urls
        ), statuses
        for key in KEYS[:8]:
            found = client.query(
                StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
            ).only_partition_result()
            assert found is not None and found.result == 5
        client.close()

        # SIGTERM, as systemd stops a service: it leaves the cluster (a tombstone), where a
        # killed instance goes silent.
        leaving = others[0]
        assert leaving.stop() == 0
        stayed = (url_a, killed.url)
        wait_for("the others to show the stopped instance as left",
                 lambda: all(_gone(url, leaving.url, "left") for url in stayed))  # fmt: skip
    finally:
        for other in others:
            other.stop()


def _cluster(url: str) -> dict[str, dict[str, Any]]:
    """`/v1/cluster` of one instance, by instance URL; empty while it does not answer."""
    try:
        statuses = httpx.get(url + "/v1/cluster", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {f"http://{s['host']}:{s['port']}": s for s in statuses}


def _all_caught_up(url: str, urls: list[str]) -> bool:
    """`url` sees exactly `urls` live, every partition's two replicas, every lag 0."""
    seen = _cluster(url)
    if sorted(seen) != sorted(urls) or not all(s["live"] for s in seen.values()):
        return False
    replicas = [r for s in seen.values() for r in s["replicas"]]
    return len(replicas) == 2 * PARTITIONS and all(r["lag"] == 0 for r in replicas)


def _gone(url: str, instance: str, reason: str) -> bool:
    """`url` shows `instance` as departed for `reason`, with no replicas left."""
    status = _cluster(url).get(instance)
    return (
        status is not None
        and not status["live"]
        and status["departure"]["reason"] == reason
        and status["replicas"] == []
    )


def _state_browser_instances(url: str) -> str:
    """The state browser page's instances table, rendered by headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#instances tbody tr")
        text = page.locator("#instances").inner_text()
        browser.close()
    return text


def _post_query(
    url: str, partition: int, bound: Position, require_active: bool = False
) -> dict[str, Any]:
    body = {
        "store": "counts",
        "query": {"type": "range"},
        "partitions": [partition],
        "bound": bound.to_map(),
        "require_active": require_active,
        "scope": "local",  # this instance's replica, as Kafka's KafkaStreams#query
    }
    answer = httpx.post(url + "/v1/query", json=body, timeout=5).json()
    result: dict[str, Any] = answer["partitions"][str(partition)]
    return result


def _answers_at(url: str, partition: int, bound: Position) -> bool:
    try:
        return bool(_post_query(url, partition, bound)["ok"])
    except (httpx.HTTPError, KeyError, ValueError):
        return False
