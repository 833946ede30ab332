"""`GET /metrics`: known traffic, then the counts Prometheus would scrape, parsed by
`prometheus_client`'s own parser of the text format."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import start_background
from iqstate_http.metrics import ServiceMetrics
from prometheus_client.parser import text_string_to_metric_families
from two_instances import PARTITIONS, ROWS, two_instances

from iqstate import (
    ACTIVE,
    STANDBY,
    Application,
    Assignment,
    HostInfo,
    KeyQuery,
    RangeQuery,
    Serde,
    StateQueryRequest,
    StaticAssignment,
    WindowKeyQuery,
)
from iqstate.runtime import partition_for_bytes

KEY_ROUTE = "/v1/stores/{store}/keys/{key}"


def scrape(http: httpx.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def http(app: Application) -> Iterator[httpx.Client]:
    server = start_background(app)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield client
    finally:
        server.stop()


def test_scraping_after_known_traffic_finds_its_counts(http: httpx.Client) -> None:
    before = scrape(http)
    for _ in range(3):
        assert http.get("/v1/stores/counts/keys/spark").json()["value"] == 3
    assert http.get("/v1/stores/counts/keys/nope").json()["value"] is None
    assert http.get("/v1/stores/by-id/keys/forty-two").status_code == 400
    assert http.get("/v1/stores/missing/keys/x").status_code == 404
    ranged = http.post("/v1/query", json={"store": "counts", "query": {"type": "range"}})
    assert ranged.status_code == 200
    asked_absent = http.post(
        "/v1/query",
        json={"store": "counts", "query": {"type": "key", "key": "spark"}, "partitions": [0, 1, 2]},
    )
    assert asked_absent.status_code == 200
    assert http.get("/v1/no-such-route").status_code == 404
    after = scrape(http)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("iqstate_queries_total", store="counts", query="KeyQuery", outcome="success") == 7
    assert grew("iqstate_queries_total", store="counts", query="RangeQuery", outcome="success") == 3
    count = grew("iqstate_query_duration_seconds_count", store="counts", query="KeyQuery")
    assert count == 5, "one duration per query: 4 lookups and one 3-partition request"
    buckets = sorted(
        (float(dict(labels)["le"]), number)
        for (name, labels), number in after.items()
        if name == "iqstate_query_duration_seconds_bucket"
        and dict(labels)["store"] == "counts"
        and dict(labels)["query"] == "KeyQuery"
    )
    assert [number for _, number in buckets] == sorted(number for _, number in buckets)
    assert buckets[-1] == (float("inf"), value(after, "iqstate_query_duration_seconds_count",
                                               store="counts", query="KeyQuery"))  # fmt: skip
    assert grew("iqstate_http_requests_total", route=KEY_ROUTE, status="200") == 4
    assert grew("iqstate_http_requests_total", route=KEY_ROUTE, status="400") == 1
    assert grew("iqstate_http_requests_total", route=KEY_ROUTE, status="404") == 1
    assert grew("iqstate_http_requests_total", route="/v1/query", status="200") == 2
    assert grew("iqstate_http_requests_total", route="other", status="404") == 1
    assert grew("iqstate_http_requests_total", route="/metrics", status="200") == 1
    labels = {pair for _, pairs in after for pair in pairs}
    assert not any("spark" in text or "no-such" in text for pair in labels for text in pair), (
        "a key or a raw path never becomes a label"
    )
    assert value(after, "iqstate_cluster_live_instances") == 1
    assert value(after, "iqstate_cluster_member") == 1
    for partition in range(3):
        assert (
            value(after, "iqstate_replica_lag_offsets", store="counts", partition=str(partition),
                  role="RUNNING") == 0
        )  # fmt: skip
    assert value(after, "iqstate_forwarded_requests_total") == 0


def test_a_query_some_of_whose_partitions_failed_counts_each_outcome(tmp_path: Path) -> None:
    """While partitions move in a cluster a query often fails on some partitions and is
    answered by the rest: each partition's outcome is counted."""
    here = HostInfo("127.0.0.1", 7070)
    layout = StaticAssignment({here: Assignment({"counts": {0: ACTIVE, 1: ACTIVE, 2: STANDBY}})})
    app = Application("moving", tmp_path, str(here), assignment=layout)
    app.key_value_store("counts", 3, value_serde="int64")
    with app:
        metrics = ServiceMetrics(app, lambda: 0)
        ranged = StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
        answers = metrics.query(ranged.require_active()).partition_results
        assert {p: answer.is_failure for p, answer in answers.items()} == {
            0: False,
            1: False,
            2: True,
        }
        samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(metrics.document().decode())
            for sample in family.samples
        }
    labels = {"store": "counts", "query": "RangeQuery"}
    assert value(samples, "iqstate_queries_total", outcome="success", **labels) == 2
    assert value(samples, "iqstate_queries_total", outcome="not_active", **labels) == 1
    assert value(samples, "iqstate_query_duration_seconds_count", **labels) == 1


def test_metrics_need_the_token_when_one_is_set(app: Application) -> None:
    server = start_background(app, token="s3cret")
    try:
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
        answer = httpx.get(
            f"{server.url}/metrics", headers={"Authorization": "Bearer s3cret"}, timeout=10
        )
        assert answer.status_code == 200 and "iqstate_queries_total" in answer.text
    finally:
        server.stop()


def test_each_partition_commit_is_timed(app: Application, http: httpx.Client) -> None:
    """KIP-1035's commit metrics: one duration per store partition a batch commits."""
    before = scrape(http)
    with app.begin_batch(position={"words": {0: 8}}, batch_id=2, stores=["counts"]) as batch:
        batch.put("counts", "spark", 4)
    after = scrape(http)
    name = "iqstate_commit_duration_seconds_count"
    assert value(after, name, store="counts") - value(before, name, store="counts") == 3
    assert value(after, name, store="by-id") == value(before, name, store="by-id")
    assert value(after, "iqstate_commit_duration_seconds_sum", store="counts") > value(
        before, "iqstate_commit_duration_seconds_sum", store="counts"
    )


def test_queries_from_many_threads_are_each_counted_once(app: Application) -> None:
    """Recording queues each query and adds the queue up in batches: queries from several
    threads at once, many times the batch, with failures among them, are all counted."""
    metrics = ServiceMetrics(app, lambda: 0)
    lookups, failing, threads = 700, 150, 4  # per thread: 4 x 850 records, several batches
    ask = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("kafka"))
    wrong_type = StateQueryRequest.in_store("counts").with_query(
        WindowKeyQuery.with_key_and_window_start_range("kafka", 0, 60_000)
    )

    def traffic() -> None:
        for n in range(lookups + failing):
            metrics.query(ask if n < lookups else wrong_type)

    workers = [threading.Thread(target=traffic) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(metrics.document().decode())
        for sample in family.samples
    }
    key = {"store": "counts", "query": "KeyQuery"}
    assert value(samples, "iqstate_queries_total", outcome="success", **key) == threads * lookups
    window = {"store": "counts", "query": "WindowKeyQuery"}
    assert (
        value(samples, "iqstate_queries_total", outcome="unknown_query_type", **window)
        == threads * failing
    ), "asked of the key's partition only: one failure per query"
    assert value(samples, "iqstate_query_duration_seconds_count", **key) == threads * lookups


def test_a_key_lookup_forwarded_to_its_active_counts_as_answered_where_it_was_answered(
    tmp_path: Path,
) -> None:
    """The key route tries this instance first: where it holds only a standby of the key's
    partition, the lookup goes to the active, and neither instance counts a failure."""
    with two_instances(tmp_path) as (a, b):
        theirs = [k for k in ROWS if partition_for_bytes(k.encode(), PARTITIONS) % 2 == 1][:3]
        with (
            httpx.Client(base_url=a.url, timeout=10) as on_a,
            httpx.Client(base_url=b.url, timeout=10) as on_b,
        ):
            before_a, before_b = scrape(on_a), scrape(on_b)
            for key in theirs:
                answer = on_a.get(f"/v1/stores/counts/keys/{key}")
                assert answer.status_code == 200 and answer.json()["value"] == ROWS[key]
            after_a, after_b = scrape(on_a), scrape(on_b)

    def outcomes(before: dict[Any, float], after: dict[Any, float]) -> dict[str, float]:
        grown = {
            dict(labels)["outcome"]: number - before.get((name, labels), 0.0)
            for (name, labels), number in after.items()
            if name == "iqstate_queries_total" and dict(labels)["query"] == "KeyQuery"
        }
        return {outcome: number for outcome, number in grown.items() if number}

    assert outcomes(before_a, after_a) == {}, "A answered none of them: nothing counted there"
    assert outcomes(before_b, after_b) == {"success": 3}
    assert (
        value(after_a, "iqstate_forwarded_requests_total")
        - value(before_a, "iqstate_forwarded_requests_total")
        == 3
    )


def test_a_key_lookup_no_replica_answers_counts_as_a_failure_where_it_was_asked(
    tmp_path: Path,
) -> None:
    """The failed panels stay honest: a lookup whose active is gone (and whose standby the
    caller did not accept) is one failure, counted by the instance it was asked of."""
    with two_instances(tmp_path) as (a, b):
        theirs = [k for k in ROWS if partition_for_bytes(k.encode(), PARTITIONS) % 2 == 1][:3]
        b.server.stop()
        with httpx.Client(base_url=a.url, timeout=10) as on_a:
            before = scrape(on_a)
            for key in theirs:
                assert on_a.get(f"/v1/stores/counts/keys/{key}").status_code == 503
            after = scrape(on_a)
    labels = {"store": "counts", "query": "KeyQuery"}
    failed = sum(
        value(after, "iqstate_queries_total", outcome=outcome, **labels)
        - value(before, "iqstate_queries_total", outcome=outcome, **labels)
        for outcome in ("not_present", "not_active")
    )
    assert failed == 3
    assert value(after, "iqstate_queries_total", outcome="success", **labels) == value(
        before, "iqstate_queries_total", outcome="success", **labels
    )


class _Picky(Serde[str]):
    """Reads every stored string but `bad`: a record written before the serde changed."""

    def serialize(self, value: str) -> bytes:
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        if data == b"bad":
            raise ValueError("picky cannot read b'bad'")
        return data.decode()


@pytest.mark.usefixtures("store_exception_log")
def test_a_range_that_fails_while_read_counts_as_a_store_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A range's rows are read lazily, after the query was counted answered: a record the
    # serde cannot read fails the partition then, and the count must say so.
    app = Application("picky", tmp_path)
    app.key_value_store("words", 1, key_serde="string", value_serde=_Picky())
    with app:
        with app.begin_batch(position={"t": {0: 1}}, batch_id=1) as batch:
            batch.put_all("words", [("a", "fine"), ("b", "bad")])
        server = start_background(app)
        try:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                answer = client.post(
                    "/v1/query", json={"store": "words", "query": {"type": "range"}}
                ).json()
                assert answer["partitions"]["0"]["failure"] == "STORE_EXCEPTION"
                samples = scrape(client)
        finally:
            server.stop()
    labels = {"store": "words", "query": "RangeQuery"}
    assert value(samples, "iqstate_queries_total", outcome="store_exception", **labels) == 1
    assert value(samples, "iqstate_queries_total", outcome="success", **labels) == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "iqstate.store_exceptions"]
    assert logged == [
        "store 'words' partition 0 reading its RangeQuery answer failed (SerializationError): "
        "store 'words': serde _Picky cannot decode the stored value b'bad': ValueError: "
        "picky cannot read b'bad'"
    ], "the operator's log names the store, partition and cause"
