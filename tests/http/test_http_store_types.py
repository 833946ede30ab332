"""Timestamped, versioned, session and global stores over HTTP, on the memory and rocksdb
engines: every query type they answer with its exact answer, merged pages of their ranges,
the key route, malformed queries named, the routing client answering as `app.query`
does, the OpenAPI document, `--store` declarations, forwarding between instances and the
state browser."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import AsyncRemoteQueryClient, RemoteQueryClient, start_background
from iqstate_http.store_options import parse_store
from openapi_spec_validator import validate
from support.network import free_port
from test_openapi import CONFIG, HOOKED, ST

from iqstate import (
    ACTIVE,
    Application,
    Assignment,
    FailureReason,
    HostInfo,
    KeyQuery,
    MultiVersionedKeyQuery,
    Query,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    StaticAssignment,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    UnknownStateStoreError,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowRangeQuery,
)
from iqstate.runtime import partition_for_bytes
from iqstate.runtime.spec import (
    GlobalKeyValueStoreSpec,
    SessionStoreSpec,
    TimestampedKeyValueStoreSpec,
    VersionedKeyValueStoreSpec,
)

PARTITIONS = 3
PRICES = {f"item-{i:02d}": i for i in range(60)}
"""The timestamped store: item-NN is NN, put at 1000 + NN."""
USERS = [f"user-{i:02d}" for i in range(45)]
TICKS = sorted(
    [k for k in (f"tick-{i:03d}" for i in range(400)) if partition_for_bytes(k.encode(), 3) == 1][
        :90
    ]
    + [k for k in (f"tick-{i:03d}" for i in range(400)) if partition_for_bytes(k.encode(), 3) != 1][
        :10
    ]
)
"""Keys of a timestamped store, 90 of its 100 in partition 1: a page of them is read from
partition 1 in several chunks."""
SESSIONS = {"alice": [(10, 20, 1), (30, 45, 2)], "bob": [(15, 25, 3)]}
POSITION = {"feed": {"0": 9}}


def versions(i: int) -> list[VersionedRecord[int]]:
    """user-NN's versions, oldest first: NN from 100; 10 x NN from 200 for even NN; a
    delete at 300 for NN divisible by 5 (a tombstone: no version from then on)."""
    starts = [(100, i)] + ([(200, i * 10)] if i % 2 == 0 else [])
    ends = [start for start, _ in starts[1:]] + [300 if i % 5 == 0 else None]
    return [VersionedRecord(v, s, e) for (s, v), e in zip(starts, ends, strict=True)]


def version_at(i: int, at: int | None) -> VersionedRecord[int] | None:
    for record in versions(i):
        if (at is None and record.valid_to is None) or (
            at is not None
            and record.timestamp <= at
            and (record.valid_to is None or at < record.valid_to)
        ):
            return record
    return None


def version_json(record: VersionedRecord[int] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"value": record.value, "timestamp": record.timestamp, "valid_to": record.valid_to}


def declare(app: Application, engine: str) -> None:
    app.timestamped_key_value_store(
        "prices", PARTITIONS, engine=engine, value_serde="int64", caching=True
    )
    app.timestamped_key_value_store("ticks", PARTITIONS, engine=engine, value_serde="int64")
    app.versioned_key_value_store(
        "profiles", PARTITIONS, 3_600_000, engine=engine, value_serde="int64"
    )
    app.session_store("visits", PARTITIONS, 3_600_000, engine=engine, value_serde="int64")
    app.global_key_value_store("settings", engine=engine)
    app.window_store("per-minute", 2, 60_000, 3_600_000, engine=engine, value_serde="int64")


def write(app: Application) -> None:
    with app.begin_batch(position={"feed": {0: 9}}, batch_id=1) as batch:
        for key, value in PRICES.items():
            batch.put("prices", key, value, timestamp=1000 + value)
        for i, tick in enumerate(TICKS):
            batch.put("ticks", tick, i, timestamp=5000 - i)
        for i, user in enumerate(USERS):
            batch.put("profiles", user, i, timestamp=100)
            if i % 2 == 0:
                batch.put("profiles", user, i * 10, timestamp=200)
            if i % 5 == 0:
                batch.delete("profiles", user, timestamp=300)
        for user, sessions in SESSIONS.items():
            for start, end, value in sessions:
                batch.put("visits", user, value, session=(start, end))
        batch.put("settings", "mode", {"fast": True})
        batch.put("per-minute", "spark", 2, window_start=60_000)


class Served:
    """The application with every new store type, served over loopback HTTP."""

    def __init__(self, app: Application, url: str) -> None:
        self.app, self.url = app, url
        self.http = httpx.Client(base_url=url, timeout=30)

    def query(self, store: str, query: dict[str, Any], **options: Any) -> httpx.Response:
        return self.http.post("/v1/query", json={"store": store, "query": query, **options})

    def values(self, store: str, query: dict[str, Any]) -> dict[str, Any]:
        """Each partition's value of an answer every partition gave."""
        answer = self.query(store, query)
        assert answer.status_code == 200, answer.text
        entries = answer.json()["partitions"]
        assert all(entry["ok"] for entry in entries.values()), entries
        assert answer.json()["position"] == POSITION
        return {partition: entry["value"] for partition, entry in entries.items()}

    def rows(self, store: str, query: dict[str, Any]) -> list[Any]:
        """Every partition's rows of a range-type answer, in key order."""
        return sorted(
            (row for rows in self.values(store, query).values() for row in rows),
            key=lambda row: row[0],
        )


@pytest.fixture(scope="module", params=["memory", "rocksdb"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    port = free_port()
    app = Application(
        "typed", tmp_path_factory.mktemp(request.param), application_server=f"127.0.0.1:{port}"
    )
    declare(app, request.param)
    with app:
        write(app)
        server = start_background(app, port=port)
        try:
            yield Served(app, server.url)
        finally:
            server.stop()


def partition_of(key: str, partitions: int = PARTITIONS) -> int:
    return partition_for_bytes(key.encode(), partitions)


# -- each query type over HTTP ----------------------------------------------------------------


def test_timestamped_queries_answer_values_with_their_timestamps(served: Served) -> None:
    found = served.values("prices", {"type": "timestamped_key", "key": "item-07"})
    assert found == {str(partition_of("item-07")): {"value": 7, "timestamp": 1007}}
    absent = served.values("prices", {"type": "timestamped_key", "key": "item-99"})
    assert list(absent.values()) == [None]
    skipping = {"type": "timestamped_key", "key": "item-08", "skip_cache": True}
    assert list(served.values("prices", skipping).values()) == [{"value": 8, "timestamp": 1008}]
    ranged = {"type": "timestamped_range", "lower": "item-10", "upper": "item-12"}
    assert served.rows("prices", ranged) == [
        [f"item-{i}", {"value": i, "timestamp": 1000 + i}] for i in (10, 11, 12)
    ]
    # The plain queries still answer plain values on a timestamped store.
    assert list(served.values("prices", {"type": "key", "key": "item-07"}).values()) == [7]
    plain = served.rows("prices", {"type": "range", "lower": "item-58"})
    assert plain == [["item-58", 58], ["item-59", 59]]


def test_versioned_queries_answer_versions(served: Served) -> None:
    def one(query: dict[str, Any]) -> Any:
        (value,) = served.values("profiles", query).values()
        return value

    assert one({"type": "versioned_key", "key": "user-04"}) == version_json(version_at(4, None))
    assert one({"type": "versioned_key", "key": "user-04"}) == {
        "value": 40, "timestamp": 200, "valid_to": None,
    }  # fmt: skip
    assert one({"type": "versioned_key", "key": "user-04", "as_of": 150}) == {
        "value": 4, "timestamp": 100, "valid_to": 200,
    }  # fmt: skip
    assert one({"type": "versioned_key", "key": "user-04", "as_of": 50}) is None
    assert one({"type": "versioned_key", "key": "user-05"}) is None  # deleted at 300
    assert one({"type": "versioned_key", "key": "user-05", "as_of": 299}) == {
        "value": 5, "timestamp": 100, "valid_to": 300,
    }  # fmt: skip
    assert one({"type": "key", "key": "user-04"}) == 40  # the current value alone

    history = {"type": "multi_versioned_key", "key": "user-10"}
    assert one(history) == [
        {"value": 100, "timestamp": 200, "valid_to": 300},
        {"value": 10, "timestamp": 100, "valid_to": 200},
    ]
    assert one({**history, "ascending": True}) == [
        {"value": 10, "timestamp": 100, "valid_to": 200},
        {"value": 100, "timestamp": 200, "valid_to": 300},
    ]
    assert one({**history, "from_time": 250}) == [{"value": 100, "timestamp": 200, "valid_to": 300}]
    assert one({**history, "from_time": 120, "to_time": 180}) == [
        {"value": 10, "timestamp": 100, "valid_to": 200}
    ]

    as_of = {"type": "versioned_range", "lower": "user-03", "upper": "user-06", "as_of": 250}
    assert served.rows("profiles", as_of) == [
        [f"user-{i:02d}", version_json(version_at(i, 250))] for i in range(3, 7)
    ]
    current = served.rows("profiles", {"type": "versioned_range", "upper": "user-05"})
    assert current == [  # user-00 and user-05 are deleted: no current version
        [f"user-{i:02d}", version_json(version_at(i, None))] for i in (1, 2, 3, 4)
    ]


def test_session_and_window_queries_by_key_and_by_start(served: Served) -> None:
    alice = served.values("visits", {"type": "window_range", "key": "alice"})
    assert alice == {
        str(partition_of("alice")): [
            {"key": "alice", "start": 10, "end": 20, "value": 1},
            {"key": "alice", "start": 30, "end": 45, "value": 2},
        ]
    }
    later = {"type": "window_range", "key": "alice", "time_from": 25, "time_to": 100}
    assert list(served.values("visits", later).values()) == [
        [{"key": "alice", "start": 30, "end": 45, "value": 2}]
    ]
    # A window store's keyed `window_range` too: the key's windows, from its partition.
    spark = served.values("per-minute", {"type": "window_range", "key": "spark"})
    assert spark == {
        str(partition_of("spark", 2)): [
            {"key": "spark", "start": 60_000, "end": 120_000, "value": 2}
        ]
    }
    starting = {"type": "window_range", "time_from": 12, "time_to": 30}
    sessions = [s for ss in served.values("visits", starting).values() for s in ss]
    assert sorted(sessions, key=lambda s: s["start"]) == [
        {"key": "bob", "start": 15, "end": 25, "value": 3},
        {"key": "alice", "start": 30, "end": 45, "value": 2},
    ]


def test_global_store_is_one_partition_answered_like_a_key_value_store(served: Served) -> None:
    assert served.values("settings", {"type": "key", "key": "mode"}) == {"0": {"fast": True}}
    assert served.rows("settings", {"type": "range"}) == [["mode", {"fast": True}]]


# -- the key route ----------------------------------------------------------------------------


def test_key_route_answers_timestamped_versioned_and_global_stores(served: Served) -> None:
    def get(path: str) -> dict[str, Any]:
        answer = served.http.get(path)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        assert body["position"] == POSITION and body["role"] == "RUNNING"
        return body

    price = get("/v1/stores/prices/keys/item-07")
    assert (price["value"], price["timestamp"]) == (7, 1007)
    assert price["partition"] == partition_of("item-07")
    missing = get("/v1/stores/prices/keys/item-99")
    assert (missing["value"], missing["timestamp"]) == (None, None)
    profile = get("/v1/stores/profiles/keys/user-04")
    assert (profile["value"], profile["timestamp"]) == (40, 200)  # the current version
    deleted = get("/v1/stores/profiles/keys/user-05")
    assert (deleted["value"], deleted["timestamp"]) == (None, None)
    setting = get("/v1/stores/settings/keys/mode")
    assert setting["value"] == {"fast": True} and "timestamp" not in setting
    assert setting["partition"] == 0


@pytest.mark.parametrize("at", [99, 100, 150, 199, 200, 250, 300, 10**12, -(2**63)])
def test_key_route_answers_a_versioned_key_as_of_an_instant(served: Served, at: int) -> None:
    for i in (4, 5, 7):
        answer = served.http.get(f"/v1/stores/profiles/keys/user-{i:02d}?as_of={at}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        found = version_at(i, at)
        expected = version_json(found) or {"value": None, "timestamp": None, "valid_to": None}
        assert {name: body[name] for name in expected} == expected, (i, at)
        with_lag = served.http.get(
            f"/v1/stores/profiles/keys/user-{i:02d}?as_of={at}&acceptable_lag=0"
        )
        assert with_lag.json()["value"] == expected["value"]
    current = served.http.get("/v1/stores/profiles/keys/user-04").json()
    assert current["valid_to"] is None and current["value"] == 40


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/v1/stores/prices/keys/item-07?as_of=5", "'as_of' reads a versioned store"),
        ("/v1/stores/profiles/keys/user-04?as_of=soon", "'as_of' must be a whole number"),
        ("/v1/stores/profiles/keys/user-04?as_of=1.5", "'as_of' must be a whole number"),
        ("/v1/stores/profiles/keys/user-04?as_of=" + "9" * 20, "'as_of' must be a whole number"),
        ("/v1/stores/profiles/keys/user-04?as_of=1&as_of=2", "'as_of' is given more than once"),
        ("/v1/stores/profiles/keys/user-04?asof=1", "unknown query parameter 'asof'"),
    ],
)
def test_key_route_refuses_a_malformed_or_misplaced_as_of(
    served: Served, path: str, named: str
) -> None:
    refused = served.http.get(path)
    assert refused.status_code == 400, refused.text
    assert named in refused.json()["error"]["message"]


def test_key_route_refuses_session_stores_as_it_refuses_window_stores(served: Served) -> None:
    for store, hint in (("visits", "'window_range' query with a 'key'"), ("per-minute",
                        "'window_key' query")):  # fmt: skip
        refused = served.http.get(f"/v1/stores/{store}/keys/alice")
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "not_a_key_value_store" and hint in error["message"]


# -- malformed queries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "query", "named"),
    [
        ("profiles", {"type": "versioned_key", "key": "u", "as_of": "yesterday"}, "'as_of'"),
        ("profiles", {"type": "versioned_key"}, "'key'"),
        ("profiles", {"type": "multi_versioned_key", "key": "u", "ascending": "yes"},
         "'ascending'"),
        ("profiles", {"type": "multi_versioned_key", "key": "u", "from_time": 1.5},
         "'from_time'"),
        ("profiles", {"type": "multi_versioned_key", "key": "u", "from_time": 9, "to_time": 3},
         "from_time (9) is after to_time (3)"),
        ("profiles", {"type": "versioned_range", "as_of": 2**63}, "'as_of'"),
        ("profiles", {"type": "versioned_key", "key": "u", "asof": 5},
         "a 'versioned_key' query has no field 'asof'; its fields are ['as_of', 'key']"),
        ("profiles", {"type": "versioned_range", "order": "descending"}, "no field 'order'"),
        ("profiles", {"type": "range"}, "versioned_key_value store"),
        ("prices", {"type": "timestamped_key", "key": "i", "skip_cache": 1}, "'skip_cache'"),
        ("prices", {"type": "timestamped_range", "order": "sideways"}, "'order'"),
        ("prices", {"type": "timestamped_key", "key": 7}, "str"),
        ("prices", {"type": "versioned_key", "key": "i"}, "timestamped_key_value store"),
        ("visits", {"type": "window_range"}, "needs 'time_from' and 'time_to'"),
        ("visits", {"type": "window_range", "time_to": 5}, "or a 'key'"),
        ("visits", {"type": "window_range", "key": "alice", "time_to": "soon"}, "'time_to'"),
        ("visits", {"type": "window_key", "key": "alice", "time_from": 0, "time_to": 1},
         "session store"),
    ],
)  # fmt: skip
def test_a_malformed_query_is_a_400_naming_what_is_wrong(
    served: Served, store: str, query: dict[str, Any], named: str
) -> None:
    refused = served.query(store, query)
    assert refused.status_code == 400, refused.text
    assert named in refused.json()["error"]["message"]


# -- merged pages -----------------------------------------------------------------------------


def pages(served: Served, store: str, query: dict[str, Any], limit: int) -> list[list[Any]]:
    """Every merged page of `query`, each asked with the previous page's cursor."""
    found: list[list[Any]] = []
    cursor = None
    while True:
        body: dict[str, Any] = {"merge": True, "limit": limit, "cursor": cursor}
        answer = served.query(store, query, **body)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["rows"]) <= limit and page["position"] == POSITION
        found.append(page["rows"])
        cursor = page["next"]
        if cursor is None:
            return found


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_merged_pages_of_a_timestamped_range(served: Served, order: str) -> None:
    query = {"type": "timestamped_range", "lower": "item-05", "upper": "item-54", "order": order}
    found = pages(served, "prices", query, 7)
    keys = [f"item-{i:02d}" for i in range(5, 55)]
    expected = [[k, {"value": PRICES[k], "timestamp": 1000 + PRICES[k]}] for k in keys]
    assert [row for page in found for row in page] == (
        expected if order == "ascending" else expected[::-1]
    )
    assert len(found) == 8  # 50 rows in pages of 7, from 3 partitions
    assert {partition_of(k) for k in keys} == {0, 1, 2}


def test_merged_pages_read_a_crowded_partition_chunk_by_chunk(served: Served) -> None:
    found = pages(served, "ticks", {"type": "timestamped_range"}, 50)
    assert [len(page) for page in found] == [50, 50]
    assert [row for page in found for row in page] == [
        [tick, {"value": i, "timestamp": 5000 - i}] for i, tick in enumerate(TICKS)
    ]


def test_an_unmerged_timestamped_range_over_max_rows_is_refused(served: Served) -> None:
    refused = served.query("ticks", {"type": "timestamped_range"}, max_rows=99)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "too_many_rows"
    answered = served.query("ticks", {"type": "timestamped_range"}, max_rows=100)
    assert answered.status_code == 200
    rows = [r for e in answered.json()["partitions"].values() for r in e["value"]]
    assert len(rows) == 100 and all(set(value) == {"value", "timestamp"} for _, value in rows)


@pytest.mark.parametrize("as_of", [None, 150, 250])
def test_merged_pages_of_a_versioned_range(served: Served, as_of: int | None) -> None:
    query: dict[str, Any] = {"type": "versioned_range", "as_of": as_of}
    rows = [row for page in pages(served, "profiles", query, 6) for row in page]
    expected = [
        [user, version_json(version_at(i, as_of))]
        for i, user in enumerate(USERS)
        if version_at(i, as_of) is not None
    ]
    assert rows == expected
    assert len({key for key, _ in rows}) == len(rows)  # never a key twice


@pytest.mark.parametrize("as_of", [None, 150])
def test_the_routing_client_pages_any_range_type_query_with_typed_rows(
    served: Served, as_of: int | None
) -> None:
    versioned = VersionedRangeQuery.with_range(None, None)
    if as_of is not None:
        versioned = versioned.as_of(as_of)
    expected = [(user, version_at(i, as_of)) for i, user in enumerate(USERS)]
    stamped = TimestampedRangeQuery.with_range("item-05", "item-54")
    with RemoteQueryClient(served.url) as client:
        rows = list(client.scan("profiles", versioned, page_size=6))
        assert rows == [(user, record) for user, record in expected if record is not None]
        prices = list(client.scan("prices", stamped, page_size=7))
        assert prices == [(f"item-{i:02d}", ValueAndTimestamp(i, 1000 + i)) for i in range(5, 55)]
        with pytest.raises(TypeError, match="KeyQuery cannot be paged"):
            client.scan("prices", KeyQuery.with_key("item-01"))
        with pytest.raises(ValueError, match="page_size"):
            client.scan("prices", stamped, page_size=0)
        assert list(client.scan("prices", stamped, page_size=7.0)) == prices  # as JSON's 7

    async def scanned() -> list[tuple[Any, Any]]:
        async with AsyncRemoteQueryClient(served.url) as client:
            return [row async for row in client.scan("profiles", versioned, page_size=10)]

    assert asyncio.run(scanned()) == rows


def test_a_versioned_range_page_cursor_belongs_to_its_query(served: Served) -> None:
    first = served.query(
        "profiles", {"type": "versioned_range", "as_of": 150}, merge=True, limit=5
    ).json()
    other = served.query(
        "profiles", {"type": "versioned_range", "as_of": 250}, merge=True, cursor=first["next"]
    )
    assert other.status_code == 400 and "another query" in other.json()["error"]["message"]
    unpaged = served.query(
        "profiles", {"type": "multi_versioned_key", "key": "user-01"}, merge=True
    )
    assert unpaged.status_code == 400 and "ordered by key" in unpaged.json()["error"]["message"]


# -- the routing client -----------------------------------------------------------------------


def materialized(result: StateQueryResult[Any]) -> dict[int, Any]:
    """Each partition's result with its iterator read, and its position."""
    answers = {}
    for partition, answer in result.partition_results.items():
        assert answer.is_success, answer.failure_message
        value = answer.result
        if hasattr(value, "__iter__") and not isinstance(value, str | dict | list):
            with value as rows:
                value = list(rows)
        answers[partition] = (value, answer.position)
    return answers


CLIENT_QUERIES: list[tuple[str, Query[Any]]] = [
    ("prices", TimestampedKeyQuery.with_key("item-33")),
    ("prices", TimestampedKeyQuery.with_key("no-such-item")),
    ("prices", TimestampedRangeQuery.with_range("item-20", "item-29")),
    ("prices", TimestampedRangeQuery.with_range("item-20", "item-29").with_descending_keys()),
    ("profiles", VersionedKeyQuery.with_key("user-12")),
    ("profiles", VersionedKeyQuery.with_key("user-12").as_of(150)),
    ("profiles", VersionedKeyQuery.with_key("user-15")),
    ("profiles", MultiVersionedKeyQuery.with_key("user-20")),
    ("profiles", MultiVersionedKeyQuery.with_key("user-20").from_time(150).to_time(260)
     .with_ascending_timestamps()),
    ("profiles", VersionedRangeQuery.with_range("user-10", "user-30").as_of(250)),
    ("profiles", VersionedRangeQuery.with_no_bounds()),
    ("profiles", KeyQuery.with_key("user-12")),
    ("visits", WindowRangeQuery.with_key("alice")),
    ("visits", WindowRangeQuery.with_window_start_range(0, 20)),
    ("per-minute", WindowRangeQuery.with_key("spark")),
    ("per-minute", WindowRangeQuery.with_key("kafka")),
    ("settings", KeyQuery.with_key("mode")),
]  # fmt: skip


def test_the_routing_client_answers_each_query_type_as_app_query_does(served: Served) -> None:
    with RemoteQueryClient(served.url) as client:
        for store, query in CLIENT_QUERIES:
            request = StateQueryRequest.in_store(store).with_query(query)
            expected = materialized(served.app.query(request))
            assert materialized(client.query(request)) == expected, (store, query)
        assert client.partition_for("profiles", "user-12") == partition_of("user-12")


def test_the_routing_client_fails_a_query_type_a_store_does_not_answer_as_app_query_does(
    served: Served,
) -> None:
    """Per partition, `UNKNOWN_QUERY_TYPE` naming what the store answers (it raised the
    service's 400 as a `ValueError`, with advice for HTTP callers)."""
    with RemoteQueryClient(served.url) as client:
        for store, query in [
            ("visits", KeyQuery.with_key("alice")),
            ("visits", RangeQuery.with_no_bounds()),
            ("prices", VersionedKeyQuery.with_key("item-33")),
            ("per-minute", TimestampedRangeQuery.with_no_bounds()),
        ]:
            request = StateQueryRequest.in_store(store).with_query(query)
            here, remote = served.app.query(request), client.query(request)
            assert remote.partition_results.keys() == here.partition_results.keys(), store
            for answer in remote.partition_results.values():
                assert answer.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
                assert f"store {store!r}" in answer.failure_message
                assert "It answers" in answer.failure_message


def test_the_asyncio_client_answers_versioned_queries_as_app_query_does(served: Served) -> None:
    requests = [
        StateQueryRequest.in_store(store).with_query(query) for store, query in CLIENT_QUERIES
    ]

    async def ask() -> list[StateQueryResult[Any]]:
        async with AsyncRemoteQueryClient(served.url) as client:
            return list(await asyncio.gather(*(client.query(r) for r in requests)))

    for request, answer in zip(requests, asyncio.run(ask()), strict=True):
        assert materialized(answer) == materialized(served.app.query(request))


def test_results_decode_to_the_core_types(served: Served) -> None:
    with RemoteQueryClient(served.url) as client:

        def only(store: str, query: Query[Any]) -> Any:
            found = client.query(StateQueryRequest.in_store(store).with_query(query))
            answer = found.only_partition_result()
            assert answer is not None
            return answer.result

        assert only("prices", TimestampedKeyQuery.with_key("item-01")) == ValueAndTimestamp(1, 1001)
        assert only("profiles", VersionedKeyQuery.with_key("user-01")) == VersionedRecord(
            1, 100, None
        )
        with only("visits", WindowRangeQuery.with_key("bob")) as sessions:
            assert list(sessions) == [(Windowed("bob", 15, 25), 3)]


# -- stores described -------------------------------------------------------------------------


def test_stores_are_described_with_their_types(served: Served) -> None:
    stores = served.http.get("/v1/stores").json()
    assert stores["prices"]["type"] == "timestamped_key_value"
    assert stores["profiles"]["type"] == "versioned_key_value"
    assert stores["profiles"]["history_retention_ms"] == 3_600_000
    assert stores["visits"]["type"] == "session" and stores["visits"]["retention_ms"] == 3_600_000
    assert stores["settings"]["type"] == "global_key_value"
    assert stores["settings"]["partitions"] == 1
    hosted = served.http.get("/v1/metadata").json()[0]["active"]
    assert hosted["settings"] == [0] and hosted["profiles"] == [0, 1, 2]


def test_openapi_lists_the_new_store_and_query_types(served: Served) -> None:
    document = served.http.get("/openapi.json").json()
    validate(document)
    schemas = document["components"]["schemas"]
    by_store: dict[str, set[str]] = {}
    for body in schemas["QueryRequest"]["oneOf"]:
        store = body["properties"]["store"]["const"]
        query = body["properties"]["query"]
        types = {q["properties"]["type"]["const"] for q in query.get("oneOf", [query])}
        key = "merged " + store if body["properties"]["merge"]["const"] else store
        by_store.setdefault(key, set()).update(types)
    assert by_store["prices"] == {"key", "range", "timestamped_key", "timestamped_range"}
    assert by_store["merged prices"] == {"range", "timestamped_range"}
    assert by_store["profiles"] == {
        "key", "versioned_key", "multi_versioned_key", "versioned_range",
    }  # fmt: skip
    assert by_store["merged profiles"] == {"versioned_range"}
    assert by_store["visits"] == {"window_range"}
    assert by_store["settings"] == {"key", "range"}
    for name in ("ResultTimestampedKey", "ResultVersionedRange", "ResultMultiVersionedKey"):
        assert name in schemas
    paths = document["paths"]
    versioned = paths["/v1/stores/profiles/keys/{key}"]["get"]
    required = versioned["responses"]["200"]["content"]["application/json"]["schema"]["required"]
    assert {"timestamp", "valid_to"} <= set(required)
    assert [p["name"] for p in versioned["parameters"]][-1] == "as_of"
    stamped = paths["/v1/stores/prices/keys/{key}"]["get"]
    assert "as_of" not in [p["name"] for p in stamped["parameters"]]
    assert "/v1/stores/settings/keys/{key}" in paths
    assert "/v1/stores/visits/keys/{key}" not in paths  # a 400 there, like window stores
    store_types = paths["/v1/stores"]["get"]["responses"]["200"]["content"]["application/json"]
    assert {"timestamped_key_value", "versioned_key_value", "session", "global_key_value"} <= set(
        store_types["schema"]["additionalProperties"]["properties"]["type"]["enum"]
    )


ORDERED_TIMES = """
import schemathesis
import schemathesis_hooks  # noqa: F401  (generated merged requests carry no cursor)


@schemathesis.hook
def before_call(context, case, **kwargs):
    # from_time after to_time is a 400 (Kafka refuses it too), which no schema can state.
    query = case.body.get("query") if isinstance(case.body, dict) else None
    if isinstance(query, dict) and query.get("type") == "multi_versioned_key":
        times = query.get("from_time"), query.get("to_time")
        if all(isinstance(t, int) for t in times) and times[0] > times[1]:
            query["from_time"], query["to_time"] = times[1], times[0]
"""
"""A schemathesis hooks module: every request schemathesis makes asks ordered times."""


def test_schemathesis_finds_nothing_in_the_new_types(served: Served, tmp_path: Path) -> None:
    if served.app.stores["prices"].engine.name != "memory":
        pytest.skip("the document is the same on every engine")
    (tmp_path / "ordered_times.py").write_text(ORDERED_TIMES)
    hooked = {
        **HOOKED,
        "SCHEMATHESIS_HOOKS": "ordered_times",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), HOOKED["PYTHONPATH"]]),
    }
    run = subprocess.run(
        [*ST, "--config-file", str(CONFIG), "run", served.url + "/openapi.json",
         "--checks", "all", "--max-examples", "20",
         "--seed", "1", "--workers", "1", "--generation-database", "none", "--no-color",
         "--request-timeout", "10", "--report-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=hooked,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]


@pytest.mark.parametrize(
    ("text", "kind", "details"),
    [
        ("prices:timestamped_key_value:4,engine=rocksdb,caching=true",
         TimestampedKeyValueStoreSpec, {"partitions": 4, "caching": True}),
        ("profiles:versioned_key_value:2,history_retention_ms=60000",
         VersionedKeyValueStoreSpec, {"partitions": 2, "history_retention_ms": 60_000}),
        ("visits:session:3,retention_ms=5000,value_serde=int64",
         SessionStoreSpec, {"partitions": 3, "retention_ms": 5_000}),
        ("settings:global_key_value", GlobalKeyValueStoreSpec, {"partitions": 1}),
        ("settings:global_key_value:1,caching=50", GlobalKeyValueStoreSpec, {"caching": 50}),
    ],
)  # fmt: skip
def test_serve_store_options_declare_the_new_types(
    tmp_path: Path, text: str, kind: type[Any], details: dict[str, Any]
) -> None:
    app = Application("cli", tmp_path)
    parse_store(text).declare(app)
    (spec,) = app.stores.values()
    assert type(spec) is kind
    assert {name: getattr(spec, name) for name in details} == details


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("p:versioned_key_value:2", "needs history_retention_ms"),
        ("v:session:2", "needs retention_ms"),
        ("v:session:2,history_retention_ms=5", "not an option of a session store"),
        ("s:global_key_value:3", "one partition"),
        ("t:timestamped_key_value:2,retention_ms=5", "not an option"),
    ],
)
def test_bad_store_options_of_the_new_types_are_named(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_store(text)


# -- forwarding between instances -------------------------------------------------------------


@contextmanager
def two_versioned_instances(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Instances A and B of one cluster: A the running active of `profiles`' even
    partitions, B of its odd ones (each writes its partitions first, then takes the
    layout)."""
    partitions = 4
    hosts = [HostInfo("127.0.0.1", free_port()) for _ in range(2)]
    layout = {
        host: Assignment({"profiles": {p: ACTIVE for p in range(partitions) if p % 2 == n}})
        for n, host in enumerate(hosts)
    }
    started: list[tuple[Application, Any]] = []
    try:
        for host in hosts:
            writing = StaticAssignment(
                {host: Assignment({"profiles": dict.fromkeys(range(partitions), ACTIVE)})}
            )
            app = Application("pair", tmp_path / str(host.port), str(host), assignment=writing)
            app.versioned_key_value_store("profiles", partitions, 3_600_000, value_serde="int64")
            app.start()
            with app.begin_batch(position={"feed": {0: 9}}, batch_id=1) as batch:
                for i, user in enumerate(USERS):
                    batch.put("profiles", user, i, timestamp=100)
                    batch.put("profiles", user, i * 10, timestamp=200)
            writing.rebalance(layout)
            started.append((app, start_background(app, port=host.port)))
        yield tuple(started)  # type: ignore[misc]
    finally:
        for app, server in started:
            server.stop()
            app.close()


def test_a_versioned_key_query_is_forwarded_to_the_instance_hosting_the_key(
    tmp_path: Path,
) -> None:
    with two_versioned_instances(tmp_path) as ((_, a), (_, b)):
        theirs = next(u for u in USERS if partition_of(u, 4) % 2 == 1)  # hosted by B only
        i = USERS.index(theirs)
        answer = httpx.post(
            a.url + "/v1/query",
            json={"store": "profiles", "query": {"type": "versioned_key", "key": theirs,
                                                 "as_of": 150}},
            timeout=30,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        entry = answer.json()["partitions"][str(partition_of(theirs, 4))]
        assert entry["ok"] and entry["host"] == b.url.removeprefix("http://")
        assert entry["value"] == {"value": i, "timestamp": 100, "valid_to": 200}
        looked_up = httpx.get(f"{a.url}/v1/stores/profiles/keys/{theirs}", timeout=30).json()
        assert (looked_up["value"], looked_up["timestamp"]) == (i * 10, 200)
        assert looked_up["host"] == b.url.removeprefix("http://")
        then = httpx.get(f"{a.url}/v1/stores/profiles/keys/{theirs}?as_of=150", timeout=30)
        assert then.json()["value"] == i and then.json()["valid_to"] == 200  # forwarded with it
        assert then.json()["host"] == b.url.removeprefix("http://")
        page = httpx.post(
            b.url + "/v1/query",
            json={"store": "profiles", "query": {"type": "versioned_range"}, "merge": True,
                  "limit": 1000},
            timeout=30,
        ).json()  # fmt: skip
        assert [key for key, _ in page["rows"]] == USERS  # from both instances, in key order


# -- the state browser ------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.iqstate_slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_state_browser_lists_the_new_types_and_shows_timestamps(served: Served) -> None:
    from playwright.sync_api import sync_playwright
    from test_browser import FLAGS

    if served.app.stores["prices"].engine.name != "memory":
        pytest.skip("the page is the same on every engine")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.goto(served.url + "/")
        page.wait_for_selector("#store option", state="attached")
        labels = page.locator("#store option").all_inner_texts()
        assert "prices (timestamped_key_value)" in labels and "visits (session)" in labels

        def look_up(store: str, key: str, shown: str) -> str:
            page.select_option("#store", store)
            page.fill("#key", key)
            page.click("#lookup button[type=submit]")
            page.wait_for_function(
                f"document.getElementById('answer').textContent.includes({json.dumps(shown)})"
            )
            return page.locator("#answer").inner_text()

        assert "value: 7   timestamp: 1007" in look_up("prices", "item-07", "timestamp")
        assert "value: 40   timestamp: 200" in look_up("profiles", "user-04", "value: 40")
        sessions = look_up("visits", "alice", "sessions")
        assert "[10, 20]: 1; [30, 45]: 2" in sessions
        page.select_option("#browse-store", "prices")
        page.click("#browse button[type=submit]")
        page.wait_for_function("document.querySelectorAll('#rows tbody tr').length === 20")
        first = page.locator("#rows tbody tr").first.inner_text()
        assert first.split("\t") == ['"item-00"', "0", "1000"]
        browser.close()


def test_the_routing_client_raises_what_app_query_raises_for_a_request_it_got_wrong(
    served: Served,
) -> None:
    unknown = StateQueryRequest.in_store("nope").with_query(KeyQuery.with_key("k"))
    with pytest.raises(UnknownStateStoreError):
        served.app.query(unknown)
    with RemoteQueryClient(served.url) as client:
        with pytest.raises(UnknownStateStoreError, match="'nope'"):
            client.query(unknown)
        with pytest.raises(UnknownStateStoreError, match="'nope'"):
            list(client.range("nope"))
        # Not a ConnectionError, which callers retry: asking again cannot help.
        with pytest.raises(ValueError, match="'per-minute'") as refused:
            list(client.range("per-minute"))
        assert not isinstance(refused.value, ConnectionError)
