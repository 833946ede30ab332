"""RemoteQueryClient (and its asyncio twin) against two instances in separate processes.

Instance A is active for partitions 0 and 1 of `counts` and standby for 2 and 3; instance
B the reverse, with its standby of partition 0 lagging 3 records and of partition 1
lagging 50. The client routes to actives, fans out, keeps sessions monotonic, and when A is
killed answers from B's standbys within the acceptable lag, or reports per partition.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from iqstate_http import AsyncRemoteQueryClient, RemoteQueryClient
from support.keys import key_in as support_key_in
from support.network import free_port

from iqstate import FailureReason, KeyQuery, Position, RangeQuery, StateQueryRequest
from iqstate.runtime import partition_for_bytes

INSTANCE = Path(__file__).parent / "instance.py"


def key_in(partition: int, partitions: int = 4) -> str:
    return support_key_in(partition, partitions, candidates=40)


@pytest.fixture
def instances(tmp_path: Path) -> Iterator[dict[str, subprocess.Popen[str]]]:
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    layout = {
        a: {"counts": {"0": "active", "1": "active", "2": "standby", "3": "standby"}},
        b: {"counts": {"2": "active", "3": "active", "0": "standby", "1": "standby"}},
    }
    lags = {b: {"counts": {"0": 3, "1": 50}}}
    processes = {}
    for name, host in (("a", a), ("b", b)):
        process = subprocess.Popen(
            [sys.executable, str(INSTANCE), str(tmp_path / name), host.split(":")[1],
             json.dumps(layout), json.dumps(lags)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        processes[name] = process
    try:
        for process in processes.values():
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        processes["a"].url = f"http://{a}"  # type: ignore[attr-defined]
        processes["b"].url = f"http://{b}"  # type: ignore[attr-defined]
        yield processes
    finally:
        for process in processes.values():
            process.kill()
            process.wait(timeout=10)


def key_request(key: str) -> StateQueryRequest[int]:
    return StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))


@pytest.mark.iqstate_slow
def test_routing_fan_out_sessions_and_failover(instances: dict[str, subprocess.Popen[str]]) -> None:
    client = RemoteQueryClient(instances["a"].url)  # type: ignore[attr-defined]
    try:
        for partition in range(4):
            key = key_in(partition)
            result = client.query(key_request(key))
            assert list(result.partition_results) == [partition]
            assert result.only_partition_result().result == int(key.split("-")[1])  # type: ignore[union-attr]
            assert result.position == Position.from_map({"src": {0: 100}})

        everything = client.query(
            StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
        )
        assert sorted(everything.partition_results) == [0, 1, 2, 3]
        by_partition = {p: list(r.result) for p, r in everything.partition_results.items()}
        assert {k: v for pairs in by_partition.values() for k, v in pairs} == {
            f"key-{i}": i for i in range(40)
        }
        for partition, pairs in by_partition.items():
            assert all(partition_for_bytes(k.encode(), 4) == partition for k, _ in pairs)

        session = client.session()
        session.query(key_request(key_in(2)))
        assert session.position == Position.from_map({"src": {0: 100}})

        instances["a"].send_signal(signal.SIGKILL)
        instances["a"].wait(timeout=10)

        from_standby = client.query(key_request(key_in(0)), acceptable_lag=10)
        assert from_standby.only_partition_result().result == int(key_in(0).split("-")[1])  # type: ignore[union-attr]
        too_stale = client.query(key_request(key_in(1)), acceptable_lag=10)
        failure = too_stale.partition_results[1]
        assert failure.failure_reason is FailureReason.NOT_PRESENT
        assert "could not be reached" in failure.failure_message or "lag" in failure.failure_message
        no_standbys = client.query(key_request(key_in(0)))
        assert no_standbys.partition_results[0].is_failure, (
            "without acceptable_lag only actives answer"
        )

        survived = client.query(
            StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds()),
            acceptable_lag=100,
        )
        assert all(r.is_success for r in survived.partition_results.values())
        assert len({k for r in survived.partition_results.values() for k, _ in r.result}) == 40
        assert session.query(key_request(key_in(3))).position == Position.from_map(
            {"src": {0: 100}}
        )
    finally:
        client.close()


@pytest.mark.iqstate_slow
def test_async_client_routes_fans_out_and_fails_over(
    instances: dict[str, subprocess.Popen[str]],
) -> None:
    async def scenario() -> None:
        async with AsyncRemoteQueryClient(instances["a"].url) as client:  # type: ignore[attr-defined]
            lookups = await asyncio.gather(
                *(client.query(key_request(key_in(partition))) for partition in range(4))
            )
            for partition, result in enumerate(lookups):
                assert list(result.partition_results) == [partition]
                found = result.only_partition_result()
                assert found is not None and found.result == int(key_in(partition).split("-")[1])

            everything = await client.query(
                StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
            )
            assert sorted(everything.partition_results) == [0, 1, 2, 3]
            pairs = {k: v for r in everything.partition_results.values() for k, v in r.result}
            assert pairs == {f"key-{i}": i for i in range(40)}

            session = client.session()
            await session.query(key_request(key_in(3)))
            assert session.position == Position.from_map({"src": {0: 100}})

            instances["a"].send_signal(signal.SIGKILL)
            instances["a"].wait(timeout=10)

            from_standby = await client.query(key_request(key_in(0)), acceptable_lag=10)
            found = from_standby.only_partition_result()
            assert found is not None and found.result == int(key_in(0).split("-")[1])
            too_stale = await client.query(key_request(key_in(1)), acceptable_lag=10)
            assert too_stale.partition_results[1].failure_reason is FailureReason.NOT_PRESENT
            assert (await session.query(key_request(key_in(2)))).position == Position.from_map(
                {"src": {0: 100}}
            )

    asyncio.run(scenario())
