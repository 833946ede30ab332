"""The HTTP service through real HTTP on loopback: queries, errors, limits, token, OpenAPI."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iqstate_http import start_background

from iqstate import Application


def test_key_lookup(client: httpx.Client) -> None:
    found = client.get("/v1/stores/counts/keys/kafka").json()
    assert found["value"] == 5 and found["position"] == {"words": {"0": 7}}
    assert isinstance(found["partition"], int)
    assert client.get("/v1/stores/counts/keys/missing").json()["value"] is None
    assert client.get("/v1/stores/by-id/keys/42").json()["value"] == {"name": "answer"}
    bad = client.get("/v1/stores/by-id/keys/forty-two")
    assert bad.status_code == 400
    assert "by-id" in bad.json()["error"]["message"] and "int" in bad.json()["error"]["message"]
    unknown = client.get("/v1/stores/nope/keys/x")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_store"
    huge = client.get("/v1/stores/by-id/keys/99999999999999999999").json()["error"]["message"]
    assert huge == (
        "store 'by-id' expects keys of type int (serde int64), got 99999999999999999999, "
        "outside the signed 64-bit range"
    )


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/v1/stores/counts%2Fkeys/keys/kafka", "counts/keys"),  # decoded: key 'keys/kafka'
        ("/v1/stores/counts%2fkeys/keys/kafka?acceptable_lag=5", "counts/keys"),
        ("/v1/stores/counts%2Fchanges", "counts/changes"),  # decoded: the changes of 'counts'
        ("/v1/metadata/stores/counts%2Fkeys/keys/kafka", "counts/keys"),
        ("/v1/metadata/stores/counts%2F", "counts/"),
        ("/v1%2Fstores%2Fcounts%2Fkeys/keys/kafka", "v1/stores/counts/keys"),  # all one segment
    ],
)
def test_an_encoded_slash_in_a_store_name_names_no_store(
    client: httpx.Client, path: str, named: str
) -> None:
    """Routing reads the decoded path, where `counts%2Fkeys/keys/kafka` is store `counts`
    and key `keys/kafka`; the path as sent names store `counts/keys`, which is none."""
    answer = client.send(client.build_request("GET", httpx.URL(str(client.base_url) + path)))
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unknown_store" and f"no store named {named!r}" in error["message"]
    # the same store and key, sent plainly, are found
    assert client.get("/v1/stores/counts/keys/kafka").json()["value"] == 5


def test_the_key_route_refuses_query_parameters_it_does_not_know(client: httpx.Client) -> None:
    # A misspelt acceptable_lag would otherwise read the running active as if not given.
    misspelt = client.get("/v1/stores/counts/keys/kafka?acceptable_lags=5")
    assert misspelt.status_code == 400
    assert misspelt.json()["error"]["message"] == (
        "unknown query parameter 'acceptable_lags'; known: ['acceptable_lag', 'as_of']"
    )
    assert client.get("/v1/stores/counts/keys/kafka?acceptable_lag").status_code == 400
    assert client.get("/v1/stores/counts/keys/kafka?acceptable_lag=5").json()["value"] == 5


def test_a_query_body_with_a_field_it_does_not_know_is_refused(client: httpx.Client) -> None:
    # A misspelt "bound" would otherwise be ignored: an answer not up to the bound asked.
    body = {"store": "counts", "query": {"type": "key", "key": "kafka"}}
    misspelt = client.post("/v1/query", json={**body, "bounds": {"words": {"0": 500}}})
    assert misspelt.status_code == 400
    message = misspelt.json()["error"]["message"]
    assert message.startswith("unknown field 'bounds' in the request body (did you mean 'bound'?)")
    assert client.post("/v1/query", json={**body, "acceptible_lag": 5}).status_code == 400
    bounded = client.post("/v1/query", json={**body, "bound": {"words": {"0": 500}}}).json()
    assert [p["failure"] for p in bounded["partitions"].values()] == ["NOT_UP_TO_BOUND"]


def test_iqv2_query_per_partition(client: httpx.Client) -> None:
    body = {
        "store": "counts",
        "query": {"type": "range", "order": "descending"},
        "execution_info": True,
    }
    result = client.post("/v1/query", json=body).json()
    pairs = [pair for p in result["partitions"].values() for pair in p["value"]]
    assert sorted(pairs) == [["flink", 1], ["kafka", 5], ["spark", 3]]
    assert result["position"] == {"words": {"0": 7}}
    assert all(p["ok"] and p["execution_info"] for p in result["partitions"].values())
    failing = client.post(
        "/v1/query",
        json={
            "store": "counts",
            "query": {"type": "key", "key": "spark"},
            "partitions": [0],
            "bound": {"words": {"0": 99}},
            "require_active": True,
        },
    ).json()
    assert list(failing["partitions"]) == ["0"]
    assert failing["partitions"]["0"]["failure"] == "NOT_UP_TO_BOUND"
    assert failing["partitions"]["0"]["ok"] is False
    windows = client.post(
        "/v1/query",
        json={
            "store": "per-minute",
            "query": {"type": "window_range", "time_from": 0, "time_to": 10**12},
        },
    ).json()
    values = [w for p in windows["partitions"].values() for w in p["value"]]
    assert values == [{"key": "spark", "start": 60_000, "end": 120_000, "value": 2}]


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        (b"{not json", 400, "not JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"query": {"type": "key", "key": "a"}}', 400, "'store'"),
        (b'{"store": "counts", "query": {"type": "prefix", "key": "a"}}', 400, "known types"),
        (b'{"store": "counts", "query": {"type": "key"}}', 400, "non-null 'key'"),
        (b'{"store": "by-id", "query": {"type": "key", "key": "x"}}', 400, "int"),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "partitions": [-1]}',
            400,
            "partition",
        ),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "bound": {"t": {"x": 1}}}',
            400,
            "position",
        ),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "bound": {"t": {"0": -5}}}',
            400,
            "offset -5 of 't' partition 0 (an offset is a whole number from 0",
        ),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "bound": {"t": {"0": '
            + b"9" * 30
            + b"}}}",
            400,
            "an offset is a whole number from 0 to 9223372036854775807",
        ),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "bound": {"t": {"'
            + b"9" * 5000
            + b'": 1}}}',
            400,
            "a partition is a whole number up to 2147483647",
        ),
        (  # "0" and "00" are one partition: a reader could take either offset
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, '
            b'"bound": {"t": {"0": 101, "00": 5}}}',
            400,
            "partition 0 of 't' is given twice",
        ),
        (
            b'{"store": "counts", "query": {"type": "key", "key": "a"}, "acceptable_lag": -1}',
            400,
            "'acceptable_lag' must be a whole number of offsets from 0",
        ),
        (b'{"store": "nope", "query": {"type": "key", "key": "a"}}', 404, "no store"),
    ],
)
def test_bad_requests_get_json_errors(
    client: httpx.Client, body: bytes, status: int, text: str
) -> None:
    response = client.post("/v1/query", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert text in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (
            "/v1/stores/counts/keys/kafka?acceptable_lag=null",
            "got 'null' (offsets a standby may be behind; leave it out",
        ),
        ("/v1/stores/counts/keys/kafka?acceptable_lag=-1", "got '-1'"),
        (
            "/v1/stores/counts/keys/kafka?acceptable_lag=" + "9" * 5000,
            "from 0 to 9223372036854775807",
        ),
        ("/v1/stores/counts/changes?acceptable_lag=" + "9" * 5000, "from 0 to 9223372036854775807"),
        ("/v1/stores/counts/changes?partitions=" + "9" * 5000, "'partitions' must be a whole"),
        # Python's int() refuses 5,000 digits, and 1e99999999 as an int is minutes of a core
        ("/v1/stores/by-id/keys/" + "9" * 5000, "outside the signed 64-bit range"),
        ("/v1/stores/by-id/keys/1e99999999", "outside the signed 64-bit range"),
        ("/v1/metadata/stores/by-id/keys/-1e99999999", "outside the signed 64-bit range"),
        ("/v1/stores/by-id/keys/1.5", "not an integer"),
        ("/v1/stores/by-id/keys/1e9999999999999999999", "its exponent is out of range"),
        ("/v1/metadata/stores/by-id/keys/0e-9999999999999999999", "its exponent is out of range"),
    ],
)
def test_numbers_in_urls_are_refused_quickly_and_named(
    client: httpx.Client, path: str, text: str
) -> None:
    response = client.get(path, timeout=5)
    assert response.status_code == 400
    assert text in response.json()["error"]["message"]


def test_int64_keys_in_urls_take_every_decimal_form(client: httpx.Client) -> None:
    with_zeros = client.get("/v1/stores/by-id/keys/-0007")
    assert with_zeros.status_code == 200 and with_zeros.json()["partition"] is not None
    for text in ("9223372036854775807", "-9223372036854775808", "1e18", "3.0", "0e99999999"):
        assert client.get(f"/v1/stores/by-id/keys/{text}").status_code == 200, text
    assert client.get("/v1/stores/by-id/keys/9223372036854775808").status_code == 400
    assert client.get("/v1/stores/by-id/keys/1e19").status_code == 400


def test_body_limit_and_unknown_routes(app: Application) -> None:
    server = start_background(app, max_body=100)
    try:
        big = server.url + "/v1/query"
        response = httpx.post(big, content=b"{" + b" " * 200 + b"}")
        assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"
        missing = httpx.get(server.url + "/v2/nothing")
        assert missing.status_code == 404 and "error" in missing.json()
        wrong_method = httpx.post(server.url + "/v1/stores/counts/keys/spark")
        assert wrong_method.status_code == 405 and "error" in wrong_method.json()
        assert httpx.head(server.url + "/v1/stores/counts/keys/spark").status_code == 200
    finally:
        server.stop()


def test_metadata_lags_health_and_503(app: Application, client: httpx.Client) -> None:
    # served on a free port, a single instance is advertised where it is served
    served = client.base_url.host, client.base_url.port
    address = f"{served[0]}:{served[1]}"
    [instance] = client.get("/v1/metadata").json()
    assert (instance["host"], instance["port"]) == served
    assert instance["active"]["counts"] == [0, 1, 2] and instance["standby"] == {}
    posted = client.post("/v1/metadata/key", json={"store": "by-id", "key": 42}).json()
    assert posted["active"] == address and posted["partition"] in (0, 1)
    assert client.get("/v1/metadata/stores/counts").json() == [instance]
    where = client.get("/v1/metadata/stores/counts/keys/spark").json()
    assert where["active"] == address and where["standbys"] == []
    assert client.get("/v1/stores/counts/keys/spark").json()["host"] == address
    assert client.get("/v1/lags").json()["counts"]["0"]["lag"] == 0
    [status] = client.get("/v1/cluster").json()
    assert (status["host"], status["port"], status["live"]) == (*served, True)
    assert status["departure"] is None
    counts = [r for r in status["replicas"] if r["store"] == "counts"]
    assert counts == [
        {"store": "counts", "partition": p, "role": "RUNNING", "lag": 0} for p in range(3)
    ]
    assert client.get("/v1/health").json() == {"status": "ok", "state": "RUNNING"}
    app.close()
    assert client.get("/v1/health").status_code == 503
    stopped = client.get("/v1/stores/counts/keys/spark")
    assert stopped.status_code == 503 and stopped.json()["error"]["code"] == "not_running"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "store": st.sampled_from(["counts", "by-id", "per-minute", "nope"]) | json_values,
        "query": st.fixed_dictionaries(
            {"type": st.sampled_from(["key", "range", "window_key", "window_range", "x"])},
            optional={
                "key": json_values,
                "lower": json_values,
                "upper": json_values,
                "order": json_values,
                "time_from": json_values,
                "time_to": json_values,
            },
        )
        | json_values,
        "partitions": json_values,
        "bound": json_values,
        "require_active": json_values,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
def test_fuzzed_requests_never_crash_the_service(
    client: httpx.Client, body: dict[str, Any]
) -> None:
    response = client.post("/v1/query", json=body)
    assert response.status_code in (200, 400, 404), response.text
    payload = response.json()
    if response.status_code != 200:
        assert set(payload["error"]) == {"code", "message"}
        assert "Traceback" not in payload["error"]["message"]


def test_keys_with_newlines_through_the_routed_app(app: Application) -> None:
    """With a token every key lookup goes through Starlette's routing, whose `path`
    parameters stop at a newline: a key holding one is still found, not a 404."""
    with app.begin_batch(position={"words": {0: 8}}, batch_id=2) as batch:
        batch.put("counts", "a\nb", 7)
    server = start_background(app, token="s3cret")
    try:
        found = httpx.get(
            server.url + "/v1/stores/counts/keys/a%0Ab",
            headers={"Authorization": "Bearer s3cret"},
        )
        where = httpx.get(
            server.url + "/v1/metadata/stores/counts/keys/a%0Ab",
            headers={"Authorization": "Bearer s3cret"},
        )
    finally:
        server.stop()
    assert found.status_code == 200 and found.json()["value"] == 7
    assert where.status_code == 200 and isinstance(where.json()["partition"], int)


def test_a_single_instance_that_is_stopping_says_so_when_asked_if_ready(
    app: Application, client: httpx.Client
) -> None:
    assert client.get("/v1/ready").status_code == 200
    assert app.leave() == 0.0  # nothing to drain: no other instance takes over
    ready = client.get("/v1/ready")
    assert ready.status_code == 503
    reason = ready.json()["reason"]
    assert "stopping" in reason and "cluster" not in reason
    assert client.get("/v1/stores/counts/keys/kafka").json()["value"] == 5, "answers still"
