"""Client input the service cannot use is a 4xx naming what is wrong, never a 500 (SPEC 11)."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

DEEP = "[" * 5_000 + "]" * 5_000  # past Python's recursion limit


def assert_refused(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert all(word in message for word in words), message
    assert "Traceback" not in message


def test_bytes_keys_are_base64_on_every_route(client: httpx.Client) -> None:
    assert client.get("/v1/stores/raw/keys/AP8=").json()["value"] == "binary"
    for route in ("/v1/stores/raw/keys/", "/v1/metadata/stores/raw/keys/"):
        for text in ("é", "AP8", "not base64!"):
            assert_refused(client.get(route + quote(text)), 400, "'raw'", "base64")
    posted = client.post("/v1/metadata/key", json={"store": "raw", "key": "é"})
    assert_refused(posted, 400, "'raw'", "base64")
    queried = client.post("/v1/query", json={"store": "raw", "query": {"type": "key", "key": "é"}})
    assert_refused(queried, 400, "'raw'", "base64")


def test_json_keys_in_paths(client: httpx.Client) -> None:
    found = client.get("/v1/stores/docs/keys/" + quote('{"id": [1, 2]}')).json()
    assert found["value"] == "a document"
    assert_refused(client.get("/v1/stores/docs/keys/" + quote(DEEP)), 400, "nested")
    assert_refused(client.get("/v1/metadata/stores/docs/keys/" + quote(DEEP)), 400, "nested")
    assert_refused(client.get("/v1/stores/docs/keys/NaN"), 400, "'docs'")


@pytest.mark.parametrize(
    "route",
    ["/v1/query", "/v1/metadata/key"],
)
def test_deeply_nested_bodies(client: httpx.Client, route: str) -> None:
    def body(key: str) -> str:
        if route == "/v1/query":
            return f'{{"store": "docs", "query": {{"type": "key", "key": {key}}}}}'
        return f'{{"store": "docs", "key": {key}}}'

    assert_refused(client.post(route, content=body(DEEP)), 400, "nested")
    assert client.post(route, content=body("[" * 20 + "]" * 20)).status_code == 200


def test_a_member_given_twice_is_refused(client: httpx.Client) -> None:
    """Readers disagree on which of two equal members counts, so neither is guessed at:
    not at the top, not in a query, not inside a JSON key."""
    for body in (
        '{"store": "counts", "store": "docs", "query": {"type": "key", "key": "a"}}',
        '{"store": "counts", "query": {"type": "key", "key": "a", "key": "b"}}',
        '{"store": "docs", "query": {"type": "key", "key": {"id": [1, 2], "id": 3}}}',
    ):
        assert_refused(client.post("/v1/query", content=body), 400, "given twice")
    twice = quote('{"id": [1, 2], "id": [1, 2]}')
    assert_refused(client.get("/v1/stores/docs/keys/" + twice), 400, "given twice")
    # The same names in different objects are fine.
    same_names = '{"store": "docs", "query": {"type": "key", "key": {"id": [1, 2]}}}'
    answered = client.post("/v1/query", content=same_names)
    assert answered.status_code == 200, answered.text
    values = [p["value"] for p in answered.json()["partitions"].values()]
    assert values == ["a document"]


@pytest.mark.parametrize("offset", ["Infinity", "-Infinity", "NaN", "1e400", "1.5", "true"])
def test_non_integer_offsets_in_a_bound(client: httpx.Client, offset: str) -> None:
    body = '{"store": "counts", "query": {"type": "key", "key": "a"}, "bound": {"t": {"0": %s}}}'
    response = client.post("/v1/query", content=body % offset)
    assert response.status_code == 400, response.text


def test_malformed_positions(client: httpx.Client) -> None:
    for bound in ({"t": {"x": 1}}, {"t": {" 1": 1}}, {"t": 5}, {"": {"0": 1}}, [1]):
        body = {"store": "counts", "query": {"type": "key", "key": "a"}, "bound": bound}
        assert_refused(client.post("/v1/query", json=body), 400, "position")


def test_out_of_range_times_and_flags(client: httpx.Client) -> None:
    window = {"type": "window_key", "key": "spark", "time_from": 0, "time_to": 2**63}
    assert_refused(
        client.post("/v1/query", json={"store": "per-minute", "query": window}), 400, "time_to"
    )
    for field in ("require_active", "execution_info"):
        body = {"store": "counts", "query": {"type": "range"}, field: "yes"}
        assert_refused(client.post("/v1/query", json=body), 400, field)
    body = {"store": "counts", "query": {"type": "key", "key": "a", "skip_cache": 1}}
    assert_refused(client.post("/v1/query", json=body), 400, "skip_cache")


def test_numeric_path_keys_are_plain_numbers(client: httpx.Client) -> None:
    for text in ("42", "42.0", "4.2e1"):  # integers, as JSON Schema's "integer" has them
        assert client.get("/v1/stores/by-id/keys/" + text).json()["value"] == {"name": "answer"}
    for text in (" 42", "+42", "4_2", "٤٢", str(2**63), "42.5", "nan", "1e400"):
        assert_refused(client.get("/v1/stores/by-id/keys/" + quote(text)), 400, "'by-id'")


def test_a_partition_out_of_range_is_refused(client: httpx.Client) -> None:
    """A request naming many partitions gets one error, not one answer per number."""
    query = {"type": "key", "key": "spark"}
    for partitions in ([0, 3], [-1], list(range(100_000))):
        body = {"store": "counts", "query": query, "partitions": partitions}
        response = client.post("/v1/query", json=body)
        assert_refused(response, 400, "'counts'", "0-2")
        assert len(response.content) < 500


def test_window_stores_refuse_key_value_queries(client: httpx.Client) -> None:
    lookup = client.get("/v1/stores/per-minute/keys/spark")
    assert_refused(lookup, 400, "'per-minute'", "window", "window_key")
    for query in ({"type": "key", "key": "spark"}, {"type": "range"}):
        body = {"store": "per-minute", "query": query}
        assert_refused(client.post("/v1/query", json=body), 400, "'per-minute'", "window")
    body = {"store": "counts", "query": {"type": "window_range", "time_from": 0, "time_to": 1}}
    assert_refused(client.post("/v1/query", json=body), 400, "'counts'", "key_value")
    windows = {"type": "window_key", "key": "spark", "time_from": 0, "time_to": 10**6}
    found = client.post("/v1/query", json={"store": "per-minute", "query": windows}).json()
    assert [pair for p in found["partitions"].values() for pair in p["value"]] == [[60_000, 2]]
