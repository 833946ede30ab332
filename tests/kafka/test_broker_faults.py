"""What a broker does to serving instances: a pause (SIGSTOP) makes every instance say it is
cut off, and recover by itself; a restart followed by an instance's death still fails over.

Two `iqstate serve --cluster` instances in their own processes, a writer (`serving=False`)
in the test process, on a broker of this module's own (the session's is never stopped).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka import LocalBroker
from iqstate_kafka.errors import BrokerUnavailableError
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import EndOffsets
from prometheus_client.parser import text_string_to_metric_families
from serving_support import running_everywhere, serving_pair, settled, wait_for

from iqstate import Application

PARTITIONS = 4
KEYS = [f"key-{i:02d}" for i in range(40)]
LIVENESS_TIMEOUT = 3.0  # iqstate serve's default
FAILOVER_TIMEOUT = 30.0  # the usual failover takes seconds; a loaded 2-core machine gets more


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    with LocalBroker(tmp_path_factory.mktemp("faulty-broker")) as broker:
        yield broker


def _write(writer: Application, batch_id: int) -> dict[str, int]:
    values = {key: batch_id * 1000 + i for i, key in enumerate(KEYS)}
    with writer.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id) as batch:
        batch.put_all("counts", list(values.items()))
    return values


def _get(url: str, path: str) -> httpx.Response | None:
    try:
        return httpx.get(url + path, timeout=2)
    except httpx.HTTPError:
        return None


def _reads(url: str, values: dict[str, int]) -> bool:
    for key, value in values.items():
        answer = _get(url, f"/v1/stores/counts/keys/{key}")
        if answer is None or answer.status_code != 200 or answer.json()["value"] != value:
            return False
    return True


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "iqstate-test-offsets"})
    try:
        return {
            p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _member(url: str) -> float | None:
    """`iqstate_cluster_member` as the instance's `/metrics` gives it (None: no answer)."""
    scraped = _get(url, "/metrics")
    if scraped is None:
        return None
    for family in text_string_to_metric_families(scraped.text):
        for sample in family.samples:
            if sample.name == "iqstate_cluster_member":
                return sample.value
    raise AssertionError(f"{url}/metrics has no iqstate_cluster_member")


def _not_yet_cut_off(url: str) -> list[str]:
    """What still says the instance is in contact (empty: everything says it is cut off)."""
    health, ready = _get(url, "/v1/health"), _get(url, "/v1/ready")
    lags, query = _get(url, "/v1/lags"), _local_active_query(url)
    if health is None or ready is None or lags is None or query is None:
        return [f"{url} did not answer"]
    wrong = []
    if _member(url) != 0:  # what the IqstateInstanceOutsideTheCluster alert watches
        wrong.append("iqstate_cluster_member is not 0")
    if health.json()["status"] != "degraded" or health.json()["broker_silence_s"] <= 3.0:
        wrong.append(f"health {health.json()}")
    if ready.status_code != 503:
        wrong.append(f"ready {ready.status_code}")
    if any(
        lag["lag"] is not None or lag["end"] is not None for lag in lags.json()["counts"].values()
    ):
        wrong.append(f"lags {lags.json()}")
    answers = list(query["partitions"].values())
    if any(p["ok"] or p["failure"] != "NOT_ACTIVE" for p in answers):
        wrong.append(f"answers {answers}")
    cut_off = [p for p in answers if p["role"] == "CUT_OFF"]  # its actives, standbys aside
    if len(cut_off) != PARTITIONS // 2 or any(
        "has not heard from its cluster" not in p["message"] for p in cut_off
    ):
        wrong.append(f"actives {cut_off}")
    return wrong


def _local_active_query(url: str) -> dict[str, Any] | None:
    """This instance's own answer (no forwarding) to a range that requires an active."""
    body = {
        "store": "counts",
        "query": {"type": "range"},
        "require_active": True,
        "scope": "local",
    }
    try:
        answer = httpx.post(url + "/v1/query", json=body, timeout=5)
    except httpx.HTTPError:
        return None
    return dict(answer.json()) if answer.status_code == 200 else None


def _in_contact(url: str, hosted: int) -> bool:
    health, ready, lags = _get(url, "/v1/health"), _get(url, "/v1/ready"), _get(url, "/v1/lags")
    if health is None or ready is None or lags is None:
        return False
    known = [lag for lag in lags.json().get("counts", {}).values() if lag["lag"] is not None]
    return (
        health.json()["status"] == "ok"
        and ready.status_code == 200
        and len(known) == hosted
        and _member(url) == 1
    )


def test_a_paused_broker_cuts_instances_off_and_they_recover(
    broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    with serving_pair(broker.bootstrap_servers, unique_name("paused"), tmp_path, PARTITIONS) as (
        instances,
        writer,
    ):
        urls = [instance.url for instance in instances]
        before = _write(writer, 1)
        wait_for("batch 1 readable everywhere", lambda: all(_reads(u, before) for u in urls))
        for url in urls:
            assert _in_contact(url, PARTITIONS)  # one active or standby of every partition

        pid = broker.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            deadline = stopped + LIVENESS_TIMEOUT + 10
            while wrong := [w for u in urls for w in _not_yet_cut_off(u)]:
                assert time.monotonic() < deadline, f"not cut off after the pause: {wrong}"
                time.sleep(0.2)
            # Measured from the pause; the check itself takes a few requests per instance.
            assert time.monotonic() - stopped < LIVENESS_TIMEOUT + 1 + 2.0
            for instance in instances:  # the page's source says so too
                status = _get(instance.url, "/v1/cluster")
                assert status is not None
                own = [s for s in status.json() if s["port"] == instance.port]
                assert {r["role"] for r in own[0]["replicas"]} == {"CUT_OFF", "STANDBY"}
                assert {r["lag"] for s in status.json() for r in s["replicas"]} == {None}
            # Routed reads need an active or a known lag: neither is left, and the answer
            # says how to read anyway; scope "local" reads each replica as it is.
            for lag in ("", "?acceptable_lag=1000000"):
                refused = _get(urls[0], f"/v1/stores/counts/keys/{KEYS[0]}{lag}")
                assert refused is not None and refused.status_code == 503, lag
                assert 'scope "local"' in refused.json()["error"]["message"], refused.json()
            local = {"store": "counts", "query": {"type": "range"}, "scope": "local"}
            rows: dict[str, int] = {}
            for url in urls:
                answer = httpx.post(url + "/v1/query", json=local, timeout=5).json()
                for entry in answer["partitions"].values():
                    assert entry["ok"] and entry["position"] == {"src": {"0": 1}}, entry
                    if entry["role"] == "CUT_OFF":  # each partition once: from its active
                        rows.update(entry["value"])
            assert rows == before
        finally:
            os.kill(pid, signal.SIGCONT)

        wait_for(
            "both instances back in contact", lambda: all(_in_contact(u, PARTITIONS) for u in urls)
        )
        wait_for("every partition running again", lambda: settled(urls, PARTITIONS))
        for instance in instances:  # an operator's log says both when and that it ended
            output = instance.output()
            assert "its active partitions are cut off until it does" in output
            assert "hears from Kafka again: its actives are no longer cut off" in output
        after = _write(writer, 2)
        wait_for("batch 2 readable everywhere", lambda: all(_reads(u, after) for u in urls))


def test_after_a_broker_restart_a_dead_instance_still_fails_over(
    broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("restarted")
    with serving_pair(broker.bootstrap_servers, app_id, tmp_path, PARTITIONS) as (
        instances,
        writer,
    ):
        survivor, victim = instances
        _write(writer, 1)
        broker.stop()
        time.sleep(10)  # an outage: each client reconnects over and over
        broker.start()
        wait_for(
            "the instances to see the restarted broker",
            lambda: all(_in_contact(i.url, PARTITIONS) for i in instances),
        )
        time.sleep(3)  # several end-offset refreshes against the restarted broker
        for instance in instances:  # each shape of librdkafka's line once, not per attempt
            refused = instance.output().count("Connection refused")
            assert 0 < refused <= 30, f"{refused} 'Connection refused' lines in a 10 s outage"
        latest = _write(writer, 2)
        wait_for("batch 2 readable", lambda: _reads(survivor.url, latest))

        victim.kill()
        wait_for(
            "the survivor running every partition",
            lambda: running_everywhere(survivor.url, PARTITIONS),
            FAILOVER_TIMEOUT,
        )
        assert _reads(survivor.url, latest)
        ends = _end_offsets(broker.bootstrap_servers, f"{app_id}-counts-changelog")
        lags = _get(survivor.url, "/v1/lags")
        assert lags is not None
        assert {
            int(p): (lag["current"], lag["end"], lag["lag"])
            for p, lag in lags.json()["counts"].items()
        } == {p: (end, end, 0) for p, end in ends.items()}


def test_end_offsets_wait_out_a_restarting_broker_for_as_long_as_asked(
    broker: LocalBroker, unique_name: Callable[[str], str]
) -> None:
    """The distributed Spark sink lists a changelog's end offsets around each batch: a broker
    restarting meanwhile (no partition leaders for a while) keeps the batch waiting for the
    patience it gives, where it used to fail the streaming query after 5 s."""
    topic = unique_name("end-offsets")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for partition in (0, 0, 0, 1):
        producer.produce(topic, b"v", partition=partition)
    assert producer.flush(30) == 0
    offsets = EndOffsets(ClusterSettings(broker.bootstrap_servers))
    assert offsets.of(topic, 2) == [3, 1]
    broker.stop()
    restart = threading.Timer(3.0, broker.start)
    try:
        with pytest.raises(BrokerUnavailableError, match="did not answer within 1 s"):
            offsets.of(topic, 2, patience=1.0)
        restart.start()
        assert offsets.of(topic, 2, patience=120.0) == [3, 1]
    finally:
        if restart.is_alive():
            restart.join()
        broker.start()  # the module's other tests use it (nothing to do when it runs)
