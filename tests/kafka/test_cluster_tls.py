"""A cluster over TLS: three `iqstate serve --cluster` instances with certificates from a CA
made in the test (`trustme`), forwarding to each other, the routing client and the page
over HTTPS, and plain HTTP to a TLS port refused; against a real broker."""

from __future__ import annotations

import contextlib
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trustme
from iqstate_http import RemoteQueryClient
from iqstate_kafka import KafkaCluster
from support.network import free_port

from iqstate import Application, KeyQuery, StateQueryRequest

PARTITIONS = 6
ROWS = {f"key-{n:03d}": n for n in range(300)}


def running(http: httpx.Client, urls: list[str]) -> bool:
    """Every partition has a running active on one of `urls`."""
    found: set[int] = set()
    for url in urls:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            for entry in http.get(f"{url}/v1/partitions", timeout=2).json():
                if entry["role"] == "RUNNING":
                    found.add(entry["partition"])
    return found == set(range(PARTITIONS))


def ready(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(f"{url}/v1/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_three_instance_cluster_serves_over_tls(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    ca, cert, key = (str(tmp_path / name) for name in ("ca.pem", "cert.pem", "key.pem"))
    authority.cert_pem.write_to_path(ca)
    certificate.cert_chain_pems[0].write_to_path(cert)
    certificate.private_key_pem.write_to_path(key)
    trusting = ssl.create_default_context(cafile=ca)

    app_id = unique_name("tls")
    bootstrap = kafka_broker.bootstrap_servers
    writer = Application(app_id, tmp_path / "writer", cluster=KafkaCluster(bootstrap),
                         serving=False)  # fmt: skip
    writer.key_value_store("counts", PARTITIONS, engine="rocksdb", value_serde="int64")
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    with writer, httpx.Client(verify=trusting, timeout=10) as http:
        with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put_all("counts", list(ROWS.items()))
        try:
            for name in ("a", "b", "c"):
                port = free_port()
                processes.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "iqstate.cli",
                            "serve",
                            "--cluster",
                            bootstrap,
                            "--app-id",
                            app_id,
                            "--application-server",
                            f"https://127.0.0.1:{port}",
                            "--state-dir",
                            str(tmp_path / name),
                            "--standbys",
                            "1",
                            "--store",
                            f"counts:key_value:{PARTITIONS},engine=rocksdb,value_serde=int64",
                            "--tls-cert",
                            cert,
                            "--tls-key",
                            key,
                            "--tls-ca",
                            ca,
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                urls.append(f"https://127.0.0.1:{port}")
                deadline = time.monotonic() + 120
                while not (ready(http, urls[-1]) and running(http, urls)):
                    assert processes[-1].poll() is None, f"{name} exited"
                    assert time.monotonic() < deadline, f"{name} did not join over TLS"
                    time.sleep(0.5)

            for url in urls:  # each key from each instance: the others' keys forwarded
                deadline = time.monotonic() + 60
                while True:
                    answers = {
                        k: http.get(f"{url}/v1/stores/counts/keys/{k}").json().get("value")
                        for k in ROWS
                    }
                    if answers == ROWS:
                        break
                    assert time.monotonic() < deadline, f"{url} answered {answers}"
                    time.sleep(0.5)
            everything = http.post(
                f"{urls[0]}/v1/query", json={"store": "counts", "query": {"type": "range"}}
            ).json()
            assert {k: v for p in everything["partitions"].values() for k, v in p["value"]} == ROWS
            assert "<html" in http.get(f"{urls[1]}/").text.lower()
            forwarded = sum(
                float(line.split()[-1])
                for url in urls
                for line in http.get(f"{url}/metrics").text.splitlines()
                if line.startswith("iqstate_forwarded_requests_total ")
            )
            assert forwarded > 0

            with RemoteQueryClient(urls[2], verify=ca) as client:
                for k in list(ROWS)[:30]:
                    result = client.query(
                        StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(k))
                    )
                    assert result.only_partition_result().result == ROWS[k]

            plain = urls[0].replace("https://", "http://")
            try:
                httpx.get(f"{plain}/v1/health", timeout=5)
                raise AssertionError("plain HTTP to a TLS port was answered")
            except httpx.HTTPError:
                pass
            assert http.get(f"{urls[0]}/v1/health").json()["status"] == "ok"
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
