"""Any instance answers any request (SPEC 8.1, 8.2): two instances of one cluster, each the
running active of half the partitions and a standby of the other half (two_instances.py).
The real-broker tests of the same behaviour are in tests/kafka/test_cluster_forwarding.py.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http.admission import RangeLimits
from support.network import free_port
from two_instances import PARTITIONS, POSITION, ROWS, layout, two_instances

from iqstate import ACTIVE, Assignment, HostInfo
from iqstate.runtime import partition_for_bytes
from iqstate.serdes import Serde


def partition_of(key: str) -> int:
    return partition_for_bytes(key.encode(), PARTITIONS)


def post(url: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(url + "/v1/query", json={"store": "counts", **body}, timeout=30, **kwargs)


def test_every_instance_answers_every_key_with_its_true_value(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, b):
        for url in (a.url, b.url):
            for key in list(ROWS)[:60]:
                answer = httpx.get(f"{url}/v1/stores/counts/keys/{key}", timeout=10).json()
                owner = a if partition_of(key) % 2 == 0 else b
                assert answer["value"] == ROWS[key], (url, key, answer)
                assert answer["partition"] == partition_of(key)
                assert answer["host"] == str(owner.host) and answer["role"] == "RUNNING"
                assert answer["position"] == {"src": {"0": 100}}
            absent = httpx.get(f"{url}/v1/stores/counts/keys/no-such-key", timeout=10)
            assert absent.status_code == 200 and absent.json()["value"] is None


def test_a_forwarded_lookup_whose_owner_is_gone_is_a_503_never_a_false_absent(
    tmp_path: Path,
) -> None:
    with two_instances(tmp_path, standby_lag=5) as (a, b):
        b.server.stop()
        theirs = next(k for k in ROWS if partition_of(k) % 2 == 1)
        refused = httpx.get(f"{a.url}/v1/stores/counts/keys/{theirs}", timeout=10)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] in ("not_present", "not_active")
        assert str(b.host) in error["message"] or "acceptable_lag" in error["message"]
        # A's own standby of that partition answers once the caller accepts its lag.
        stale_ok = httpx.get(
            f"{a.url}/v1/stores/counts/keys/{theirs}?acceptable_lag=5", timeout=10
        ).json()
        assert stale_ok["value"] == ROWS[theirs]
        assert stale_ok["role"] == "STANDBY" and stale_ok["lag"] == 5
        too_stale = httpx.get(f"{a.url}/v1/stores/counts/keys/{theirs}?acceptable_lag=4")
        assert too_stale.status_code == 503
        bad = httpx.get(f"{a.url}/v1/stores/counts/keys/{theirs}?acceptable_lag=-1")
        assert bad.status_code == 400 and "acceptable_lag" in bad.json()["error"]["message"]


def test_a_query_covers_every_partition_from_any_instance_and_local_scope_stays_local(
    tmp_path: Path,
) -> None:
    with two_instances(tmp_path) as (a, b):
        for url in (a.url, b.url):
            answer = post(url, {"query": {"type": "range"}}).json()
            assert sorted(answer["partitions"], key=int) == [str(p) for p in range(PARTITIONS)]
            rows = {k: v for e in answer["partitions"].values() for k, v in e["value"]}
            assert rows == ROWS
            for partition, entry in answer["partitions"].items():
                owner = a if int(partition) % 2 == 0 else b
                assert entry["host"] == str(owner.host) and entry["role"] == "RUNNING", entry
                assert entry["lag"] == 0
            assert answer["position"] == {"src": {"0": 100}}
        local = post(a.url, {"query": {"type": "range"}, "scope": "local"}).json()
        # Kafka's semantics: every replica hosted here answers, standbys included.
        assert sorted(local["partitions"], key=int) == [str(p) for p in range(PARTITIONS)]
        roles = {int(p): e["role"] for p, e in local["partitions"].items()}
        assert roles == {p: "RUNNING" if p % 2 == 0 else "STANDBY" for p in range(PARTITIONS)}
        assert all(e["host"] == str(a.host) for e in local["partitions"].values())
        key = next(k for k in ROWS if partition_of(k) % 2 == 1)
        keyed = post(a.url, {"query": {"type": "key", "key": key}}).json()
        assert list(keyed["partitions"]) == [str(partition_of(key))]
        assert keyed["partitions"][str(partition_of(key))]["value"] == ROWS[key]
        assert keyed["partitions"][str(partition_of(key))]["host"] == str(b.host)


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_merged_pages_return_every_key_once_in_order_across_instances(
    tmp_path: Path, order: str
) -> None:
    with two_instances(tmp_path) as (a, b):
        query = {"type": "range", "lower": "key-0100", "upper": "key-0499", "order": order}
        seen: list[str] = []
        cursor = None
        urls = [a.url, b.url]
        pages = 0
        while True:
            body: dict[str, Any] = {"query": query, "merge": True, "limit": 37}
            if cursor is not None:
                body["cursor"] = cursor
            page = post(urls[pages % 2], body).json()  # each page from the other instance
            assert len(page["rows"]) <= 37
            assert page["position"] == {"src": {"0": 100}}
            seen.extend(k for k, _ in page["rows"])
            pages += 1
            cursor = page["next"]
            if cursor is None:
                break
        expected = sorted(k for k in ROWS if "key-0100" <= k <= "key-0499")
        assert seen == (expected if order == "ascending" else expected[::-1])
        assert pages == -(-len(expected) // 37)


def test_merged_pages_of_a_prefix_scan(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, b):
        query = {"type": "prefix_scan", "prefix": "key-02"}
        first = post(a.url, {"query": query, "merge": True, "limit": 40}).json()
        second = post(b.url, {"query": query, "merge": True, "cursor": first["next"]}).json()
        keys = [k for k, _ in first["rows"] + second["rows"]]
        assert keys == sorted(k for k in ROWS if k.startswith("key-02"))
        assert second["next"] is None


def test_an_empty_partition_list_asks_no_partition_merged_or_not(tmp_path: Path) -> None:
    """As `with_partitions(set())`: merging used to read it as every partition."""
    with two_instances(tmp_path) as (a, _):
        query = {"type": "range"}
        assert post(a.url, {"query": query, "partitions": []}).json()["partitions"] == {}
        merged = post(a.url, {"query": query, "partitions": [], "merge": True}).json()
        assert merged["rows"] == [] and merged["next"] is None
        one = post(a.url, {"query": query, "partitions": [1], "merge": True}).json()
        assert one["rows"] and all(partition_of(k) == 1 for k, _ in one["rows"])


def test_cursors_are_checked(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, _):
        page = post(a.url, {"query": {"type": "range"}, "merge": True, "limit": 5}).json()
        other_query = post(
            a.url,
            {"query": {"type": "range", "lower": "key-0300"}, "merge": True,
             "cursor": page["next"]},
        )  # fmt: skip
        assert other_query.status_code == 400
        assert "another query" in other_query.json()["error"]["message"]
        garbage = post(a.url, {"query": {"type": "range"}, "merge": True, "cursor": "!!"})
        assert garbage.status_code == 400 and "cursor" in garbage.json()["error"]["message"]
        unmerged_cursor = post(a.url, {"query": {"type": "range"}, "cursor": page["next"]})
        assert unmerged_cursor.status_code == 400
        not_a_range = post(a.url, {"query": {"type": "key", "key": "x"}, "merge": True})
        assert not_a_range.status_code == 400 and "range" in not_a_range.json()["error"]["message"]
        for limit in (0, 100_001, "10", True, 2.5):
            bad = post(a.url, {"query": {"type": "range"}, "merge": True, "limit": limit})
            assert bad.status_code == 400, limit
        # an integer as JSON Schema (and the OpenAPI document) sees one
        whole = post(a.url, {"query": {"type": "range"}, "merge": True, "limit": 5.0}).json()
        assert len(whole["rows"]) == 5


def test_an_unmerged_answer_over_max_rows_is_a_422_that_says_to_page(tmp_path: Path) -> None:
    with two_instances(tmp_path, max_rows=250) as (a, b):
        for url in (a.url, b.url):
            refused = post(url, {"query": {"type": "range"}})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "too_many_rows" and '"merge": true' in error["message"]
        small = post(a.url, {"query": {"type": "range", "upper": "key-0099"}})
        assert small.status_code == 200
        lowered = post(a.url, {"query": {"type": "range", "upper": "key-0099"}, "max_rows": 10})
        assert lowered.status_code == 422


class _Fragile(Serde[Any]):
    """int64 values, except that the value 13 cannot be read back (a damaged record)."""

    name = "fragile"

    def serialize(self, value: Any) -> bytes:
        return json.dumps(value).encode()

    def deserialize(self, data: bytes) -> Any:
        if data == b"13":
            raise ValueError("unreadable record")
        return json.loads(data)


def test_one_bad_record_fails_its_partition_only(tmp_path: Path) -> None:
    rows = {f"key-{i:04d}": i for i in range(60)}
    damaged = partition_of("key-0013")
    with two_instances(tmp_path, rows=rows, value_serde=_Fragile()) as (a, b):
        for url in (a.url, b.url):
            answer = post(url, {"query": {"type": "range"}})
            assert answer.status_code == 200, answer.text
            entries = answer.json()["partitions"]
            assert entries[str(damaged)]["ok"] is False
            assert entries[str(damaged)]["failure"] == "STORE_EXCEPTION"
            assert "unreadable record" in entries[str(damaged)]["message"]
            healthy = {k: v for p, e in entries.items() if e["ok"] for k, v in e["value"]}
            assert healthy == {k: v for k, v in rows.items() if partition_of(k) != damaged}
            page = post(url, {"query": {"type": "range"}, "merge": True})
            assert page.status_code == 503
            assert str(damaged) in page.json()["error"]["partitions"]


def test_a_replica_whose_store_fails_to_read_gives_way_to_the_next_one(
    tmp_path: Path,
) -> None:
    """A's standby of key-0012's partition fails to read it (a damaged record), B's running
    active holds it: a caller accepting a lag, asking A, which tries its own replica first,
    gets B's answer, on the key route and `POST /v1/query`; with B gone, the store failure
    is the answer (not that B is unreachable)."""
    rows = {f"key-{i:04d}": i + 1 for i in range(60)}  # key-0012 holds 13
    damaged = partition_of("key-0012")
    assert damaged % 2 == 1, "an odd partition: B is its running active, A its standby"
    with two_instances(tmp_path, rows=rows, value_serde=(_Fragile(), "int64")) as (a, b):
        lagged = httpx.get(f"{a.url}/v1/stores/counts/keys/key-0012?acceptable_lag=0")
        assert lagged.status_code == 200, lagged.text
        assert lagged.json()["value"] == 13 and lagged.json()["host"] == str(b.host)
        answer = post(a.url, {"query": {"type": "range"}, "acceptable_lag": 0}).json()
        entry = answer["partitions"][str(damaged)]
        assert entry["ok"] and entry["host"] == str(b.host), entry
        assert {k: v for e in answer["partitions"].values() for k, v in e["value"]} == rows
    with two_instances(
        tmp_path / "alone", rows=rows, value_serde=(_Fragile(), "int64"), standby_lag=5
    ) as (a, b):
        b.server.stop()
        failed = httpx.get(f"{a.url}/v1/stores/counts/keys/key-0012?acceptable_lag=5")
        assert failed.status_code == 503
        error = failed.json()["error"]
        assert error["code"] == "store_exception" and "unreadable" in error["message"]
        answer = post(a.url, {"query": {"type": "range"}, "acceptable_lag": 5}).json()
        assert answer["partitions"][str(damaged)]["failure"] == "STORE_EXCEPTION"


def test_range_requests_beyond_the_limits_wait_or_get_503_with_retry_after(
    tmp_path: Path,
) -> None:
    limits = RangeLimits(max_active=1, max_waiting=1, wait_timeout=0.5)
    rows = {f"key-{i:05d}": i for i in range(30_000)}
    with two_instances(tmp_path, rows=rows, range_limits=limits) as (a, _):
        statuses: list[int] = []
        retry_after: list[str | None] = []

        def full_range() -> None:
            answer = post(a.url, {"query": {"type": "range"}})
            statuses.append(answer.status_code)
            retry_after.append(answer.headers.get("retry-after"))

        threads = [threading.Thread(target=full_range) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert 200 in statuses and 503 in statuses, statuses
        assert all(r == "1" for s, r in zip(statuses, retry_after, strict=True) if s == 503)
        # Key lookups are never held back by ranges.
        assert httpx.get(f"{a.url}/v1/stores/counts/keys/key-00001").json()["value"] == 1


def test_forwarded_requests_carry_the_token(tmp_path: Path) -> None:
    with two_instances(tmp_path, token="s3cret") as (a, b):
        theirs = next(k for k in ROWS if partition_of(k) % 2 == 1)
        headers = {"Authorization": "Bearer s3cret"}
        found = httpx.get(f"{a.url}/v1/stores/counts/keys/{theirs}", headers=headers).json()
        assert found["value"] == ROWS[theirs] and found["host"] == str(b.host)
        assert httpx.get(f"{a.url}/v1/stores/counts/keys/{theirs}").status_code == 401
        answer = post(a.url, {"query": {"type": "range"}}, headers=headers).json()
        assert {k for e in answer["partitions"].values() for k, _ in e["value"]} == set(ROWS)


def test_position_of_answers(tmp_path: Path) -> None:
    with two_instances(tmp_path) as (a, _):
        answer = post(a.url, {"query": {"type": "range"}, "bound": POSITION}).json()
        assert all(e["ok"] for e in answer["partitions"].values())
        beyond = post(a.url, {"query": {"type": "range"}, "bound": {"src": {"0": 101}}}).json()
        assert all(e["failure"] == "NOT_UP_TO_BOUND" for e in beyond["partitions"].values())


def test_a_replica_a_rebalance_just_made_a_lagging_standby_is_not_read_as_running(
    tmp_path: Path,
) -> None:
    """The instances' view of the cluster is cached for half a second: right after a
    rebalance it still called A's replica of partition 0 the running active, and A answered
    from it, labelled `RUNNING` with lag 0, though it had just become a standby 1,000
    offsets behind, past `acceptable_lag`. Whether a replica may answer is decided on its
    state now."""
    with two_instances(tmp_path) as (a, b):
        body = {"query": {"type": "range"}, "partitions": [0], "acceptable_lag": 5}
        warm = post(a.url, body).json()["partitions"]["0"]
        assert warm["ok"] and warm["host"] == str(a.host) and warm["role"] == "RUNNING"
        swapped = layout(b.host, a.host)  # B now the active of partition 0, A its standby
        for instance in (a, b):
            for partition in range(PARTITIONS):
                instance.assignment.set_end_offset("counts", partition, 1000)
            instance.assignment.rebalance(swapped)
        answer = post(a.url, body).json()["partitions"]["0"]
        if answer["ok"]:  # B answered (the cached view was read again)
            assert answer["host"] == str(b.host) and answer["role"] == "RUNNING"
        else:
            assert (
                answer["failure"] == "NOT_ACTIVE" and "over acceptable_lag 5" in answer["message"]
            )
            assert answer["role"] == "STANDBY" and answer["lag"] == 1000


def test_the_key_route_reads_a_local_standby_only_as_it_is_now(tmp_path: Path) -> None:
    """The key route took a local standby's lag from the cluster view (cached for half a
    second): a standby that fell behind since (rebuilt empty, say) still answered, labelled
    with its old lag, where it may no longer. It is asked only if its lag now is within
    `acceptable_lag`; else the partition's running active answers."""
    with two_instances(tmp_path, standby_lag=5) as (a, b):
        theirs = next(k for k in ROWS if partition_of(k) % 2 == 1)
        url = f"{a.url}/v1/stores/counts/keys/{theirs}?acceptable_lag=5"
        warm = httpx.get(url, timeout=10).json()
        assert (warm["host"], warm["role"], warm["lag"]) == (str(a.host), "STANDBY", 5)
        a.assignment.set_end_offset("counts", partition_of(theirs), 1000)
        answer = httpx.get(url, timeout=10).json()
        assert (answer["host"], answer["role"]) == (str(b.host), "RUNNING"), answer
        assert answer["value"] == ROWS[theirs]


@pytest.fixture
def open_iterators(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The ids of the range iterators queries opened and nothing closed yet (a spy on the
    core's `KeyValueIterator`: an unclosed one holds its rows, and a plugin engine's
    `on_close` resources, until garbage collection)."""
    from iqstate.iterators import KeyValueIterator

    opened: set[int] = set()
    init, close = KeyValueIterator.__init__, KeyValueIterator.close

    def tracked_init(self: KeyValueIterator[Any, Any], *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.add(id(self))

    def tracked_close(self: KeyValueIterator[Any, Any]) -> None:
        opened.discard(id(self))
        close(self)

    monkeypatch.setattr(KeyValueIterator, "__init__", tracked_init)
    monkeypatch.setattr(KeyValueIterator, "close", tracked_close)
    return opened


def test_a_merged_page_that_fails_closes_every_local_range_it_opened(
    tmp_path: Path, open_iterators: set[int]
) -> None:
    """Ranges opened on this instance before the page failed (another instance gone, a
    partition's record unreadable) are closed, read or not."""
    rows = {f"key-{i:04d}": i for i in range(60)}
    damaged = partition_of("key-0013")
    with two_instances(tmp_path, rows=rows, value_serde=_Fragile()) as (a, b):
        open_iterators.clear()
        unreadable = post(a.url, {"query": {"type": "range"}, "merge": True})
        assert unreadable.status_code == 503
        assert str(damaged) in unreadable.json()["error"]["partitions"]
        assert open_iterators == set()
        b.server.stop()
        mine = [p for p in range(PARTITIONS) if p % 2 == 0 and p != damaged]
        gone = post(a.url, {"query": {"type": "range"}, "merge": True, "limit": 5})
        assert gone.status_code == 503
        assert (
            str(damaged + 1 if damaged % 2 == 0 else damaged) in gone.json()["error"]["partitions"]
        )
        assert open_iterators == set()
        # the same ranges of this instance's own partitions page as before
        own = post(a.url, {"query": {"type": "range"}, "merge": True, "partitions": mine})
        assert own.status_code == 200, own.text
        assert [k for k, _ in own.json()["rows"]][:3] == sorted(
            k for k in rows if partition_of(k) in mine
        )[:3]
        assert open_iterators == set()


class _HeldPeer(BaseHTTPRequestHandler):
    """An instance that takes a request and answers nothing until the test ends."""

    release = threading.Event()

    def do_POST(self) -> None:
        _HeldPeer.release.wait(120)
        self.send_response(503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_unmerged_answer_is_refused_once_the_rows_come_past_max_rows(tmp_path: Path) -> None:
    """Rows are counted as the instances answer: A's and B's partitions together pass
    `max_rows` (neither alone does), so A answers 422 without waiting for C, which holds
    the request. Waiting for every instance held up to N x max_rows rows first."""
    held = ThreadingHTTPServer(("127.0.0.1", free_port()), _HeldPeer)
    threading.Thread(target=held.serve_forever, daemon=True).start()
    try:
        with two_instances(tmp_path, max_rows=250, forward_timeout=300) as (a, b):
            c = HostInfo("127.0.0.1", held.server_address[1])
            a.assignment.rebalance(
                {
                    a.host: Assignment({"counts": {0: ACTIVE, 2: ACTIVE}}),
                    b.host: Assignment({"counts": {1: ACTIVE, 3: ACTIVE}}),
                    c: Assignment({"counts": {4: ACTIVE, 5: ACTIVE}}),
                }
            )
            per_partition = {p: sum(partition_of(k) == p for k in ROWS) for p in range(6)}
            assert per_partition[0] + per_partition[2] <= 250  # A's part alone passes
            assert per_partition[1] + per_partition[3] <= 250  # B's too
            assert sum(per_partition[p] for p in range(4)) > 250
            refused = post(a.url, {"query": {"type": "range"}})  # 30 s timeout; C holds 120 s
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "too_many_rows"
    finally:
        _HeldPeer.release.set()
        held.shutdown()
        held.server_close()
