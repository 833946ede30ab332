"""TLS: the service, forwarding between instances and the routing client over HTTPS, with a
CA and certificates made in the test (`trustme`)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from httpx_sse import connect_sse
from iqstate_http import RemoteQueryClient, start_background
from iqstate_http.status import StatusError, fetch
from two_instances import PARTITIONS, ROWS, two_instances

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.runtime import partition_for_bytes


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    """A CA, a certificate for 127.0.0.1 signed by it (files), and a context trusting it."""
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem"}
    authority.cert_pem.write_to_path(str(files["ca"]))
    certificate.cert_chain_pems[0].write_to_path(str(files["cert"]))
    certificate.private_key_pem.write_to_path(str(files["key"]))
    trusting = ssl.create_default_context(cafile=str(files["ca"]))
    return {**{name: str(path) for name, path in files.items()}, "context": trusting}


@pytest.fixture
def served(app: Application, pki: dict[str, Any]) -> Iterator[str]:
    server = start_background(app, ssl_certfile=pki["cert"], ssl_keyfile=pki["key"])
    try:
        yield server.url
    finally:
        server.stop()


def test_the_service_answers_over_https_only(served: str, pki: dict[str, Any]) -> None:
    assert served.startswith("https://127.0.0.1:")
    with httpx.Client(verify=pki["context"], timeout=10) as http:
        assert http.get(f"{served}/v1/stores/counts/keys/spark").json()["value"] == 3
        assert http.get(f"{served}/").status_code == 200  # the state browser's page
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA
        httpx.get(f"{served}/v1/health", timeout=10)
    plain = served.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port: refused, no answer
        httpx.get(f"{plain}/v1/health", timeout=10)
    with httpx.Client(verify=pki["context"], timeout=10) as http:  # and it still serves
        assert http.get(f"{served}/v1/health").json()["status"] == "ok"


def test_tls_settings_come_in_pairs(app: Application, pki: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="both a certificate"):
        start_background(app, ssl_certfile=pki["cert"])
    with pytest.raises(ValueError, match="ssl_ca_certs needs"):
        start_background(app, ssl_ca_certs=pki["ca"])


def test_instances_forward_to_each_other_and_the_client_routes_over_https(
    tmp_path: Path, pki: dict[str, Any]
) -> None:
    tls = {"ssl_certfile": pki["cert"], "ssl_keyfile": pki["key"], "ssl_ca_certs": pki["ca"]}
    with two_instances(tmp_path, **tls) as (a, b):
        assert a.url.startswith("https://") and b.url.startswith("https://")
        elsewhere = next(
            key for key in ROWS if partition_for_bytes(key.encode(), PARTITIONS) % 2 == 1
        )  # B runs the odd partitions: A forwards
        with httpx.Client(verify=pki["context"], timeout=10) as http:
            answer = http.get(f"{a.url}/v1/stores/counts/keys/{elsewhere}").json()
            assert answer["value"] == ROWS[elsewhere] and answer["host"] == str(b.host)
            everything = http.post(
                f"{a.url}/v1/query", json={"store": "counts", "query": {"type": "range"}}
            ).json()
            rows = {k: v for p in everything["partitions"].values() for k, v in p["value"]}
            assert rows == ROWS
            metrics = http.get(f"{a.url}/metrics").text
            assert "iqstate_forwarded_requests_total 0.0" not in metrics
        with RemoteQueryClient(a.url, verify=pki["ca"]) as client:
            result = client.query(
                StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(elsewhere))
            )
            assert result.only_partition_result().result == ROWS[elsewhere]


def test_a_change_stream_follows_the_other_instances_partitions_over_https(
    tmp_path: Path, pki: dict[str, Any]
) -> None:
    """A's standbys lag, so a stream asking for no lag through A follows B's partitions
    through B's stream, over HTTPS both hops: the snapshots of every partition, then a
    batch written on B only (nothing replicates between these two: only B's stream has it)."""
    tls = {"ssl_certfile": pki["cert"], "ssl_keyfile": pki["key"], "ssl_ca_certs": pki["ca"]}
    with two_instances(tmp_path, standby_lag=1_000, **tls) as (a, b):
        odd_key = next(k for k in ROWS if partition_for_bytes(k.encode(), PARTITIONS) % 2 == 1)
        odd = partition_for_bytes(odd_key.encode(), PARTITIONS)
        seen: dict[str, int] = {}
        url = f"{a.url}/v1/stores/counts/changes?acceptable_lag=0"
        with (
            httpx.Client(verify=pki["context"], timeout=10) as http,
            connect_sse(http, "GET", url) as source,
        ):
            assert source.response.status_code == 200
            events = (json.loads(sse.data) for sse in source.iter_sse() if sse.data)
            snapshots = [next(events) for _ in range(PARTITIONS)]
            assert sorted(s["partition"] for s in snapshots) == list(range(PARTITIONS))
            assert all(s["snapshot"] for s in snapshots)
            for snapshot in snapshots:
                seen.update((c["key"], c["value"]) for c in snapshot["changes"])
            assert seen == ROWS
            with b.app.begin_batch(position={"src": {0: 101}}, batch_id=2) as batch:
                batch.put("counts", odd_key, -1)
            change = next(events)
        assert change["partition"] == odd and not change["snapshot"]
        assert [(c["key"], c["value"]) for c in change["changes"]] == [(odd_key, -1)]


def test_a_certificate_nobody_trusts_is_named_as_the_reason(
    served: str, tmp_path: Path, pki: dict[str, Any]
) -> None:
    """The routing client, and an instance forwarding to another, that do not trust the
    other side's certificate say so, not just that a connection failed."""
    rogue = tmp_path / "rogue-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(rogue))
    with (
        RemoteQueryClient(served, verify=str(rogue)) as client,
        pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.query(StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("spark")))
    tls = {"ssl_certfile": pki["cert"], "ssl_keyfile": pki["key"], "ssl_ca_certs": str(rogue)}
    with two_instances(tmp_path / "pair", **tls) as (a, _):
        elsewhere = next(
            key for key in ROWS if partition_for_bytes(key.encode(), PARTITIONS) % 2 == 1
        )
        with httpx.Client(verify=pki["context"], timeout=10) as http:
            refused = http.get(f"{a.url}/v1/stores/counts/keys/{elsewhere}")
        assert refused.status_code == 503
        assert "CERTIFICATE_VERIFY_FAILED" in refused.json()["error"]["message"], refused.json()


def test_iqstate_status_says_what_to_change_for_a_wrong_scheme_or_ca(
    served: str, app: Application, pki: dict[str, Any]
) -> None:
    """`iqstate status` against a TLS instance: a plain-http URL, a missing CA, and https to
    a plain instance each fail with the option that fixes them."""
    plain_url = served.replace("https://", "http://")
    with pytest.raises(StatusError, match="use an https:// URL with --tls-ca"):
        fetch(plain_url, None)
    with pytest.raises(StatusError, match="give --tls-ca the CA bundle"):
        fetch(served, None)
    assert fetch(served, None, pki["context"])[0]["status"] == "ok"
    plain = start_background(app)
    try:
        with pytest.raises(StatusError, match="serves plain http: use an http:// URL"):
            fetch(plain.url.replace("http://", "https://"), None, pki["context"])
    finally:
        plain.stop()
