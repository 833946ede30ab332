"""Where a single instance served on a free port says it is: the address it is served at,
so its answers name it and the routing client asks it once per lookup."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import RemoteQueryClient, serve, start_background
from support.network import free_port

from iqstate import (
    ACTIVE,
    Application,
    Assignment,
    HostInfo,
    KeyQuery,
    StateQueryRequest,
    StaticAssignment,
)


class _Counting(httpx.HTTPTransport):
    """httpx's transport, keeping the URL of every request sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(str(request.url))
        return super().handle_request(request)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Application]:
    application = Application("advertised", tmp_path / "state")
    application.key_value_store("counts", 4, value_serde="int64")
    with application:
        with application.begin_batch(position={"words": {0: 3}}, batch_id=1) as batch:
            batch.put_all("counts", [("spark", 3), ("kafka", 5)])
        yield application


def test_a_free_port_is_the_address_answers_name_and_clients_ask_once(app: Application) -> None:
    assert app.single_instance and str(app.host_info) == "localhost:7070"
    server = start_background(app)
    try:
        served = server.url.removeprefix("http://")
        assert str(app.host_info) == served
        answer = httpx.get(f"{server.url}/v1/stores/counts/keys/kafka").json()
        assert (answer["value"], answer["host"]) == (5, served)
        [status] = app.cluster_status()
        assert str(status.host_info) == served
        transport = _Counting()
        with RemoteQueryClient(server.url, transport=transport) as client:
            for key, value in (("spark", 3), ("kafka", 5), ("flink", None)):
                request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
                [answer] = client.query(request).partition_results.values()
                assert answer.is_success and answer.result == value
        # discovery (metadata and stores), then one request per lookup, all to this server
        assert len(transport.sent) == 2 + 3
        assert all(url.startswith(server.url) for url in transport.sent)
    finally:
        server.stop()


def test_an_address_advertised_while_served_is_the_one_answers_name(app: Application) -> None:
    server = start_background(app)
    try:
        app.advertise("proxy.example:443")  # behind a proxy, say
        answer = httpx.get(f"{server.url}/v1/stores/counts/keys/kafka").json()
        assert answer["host"] == "proxy.example:443"
        [instance] = httpx.get(f"{server.url}/v1/metadata").json()
        assert (instance["host"], instance["port"]) == ("proxy.example", 443)
    finally:
        server.stop()


def test_an_ipv6_loopback_is_advertised_in_brackets(app: Application) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    server = start_background(app, host="::1")
    try:
        assert server.url == f"http://[::1]:{server.port}"
        assert str(app.host_info) == f"[::1]:{server.port}"
        with RemoteQueryClient(server.url) as client:
            request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("kafka"))
            [answer] = client.query(request).partition_results.values()
            assert answer.result == 5
    finally:
        server.stop()


def test_a_service_that_cannot_start_leaves_the_address_as_it_was(app: Application) -> None:
    with pytest.raises(ValueError, match="max_rows"):
        start_background(app, max_rows=-1)
    assert str(app.host_info) == "localhost:7070"


def test_a_given_port_keeps_the_address_the_application_was_made_with(
    app: Application, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    with caplog.at_level(logging.WARNING, "iqstate_http"):
        server = start_background(app, port=port)
    try:
        assert str(app.host_info) == "localhost:7070"  # a proxy may forward 7070 here
        assert httpx.get(f"{server.url}/v1/stores/counts/keys/kafka").json()["host"] == (
            "localhost:7070"
        )
        assert f"serving on port {port}, but the application's application_server is " in (
            caplog.text
        )
    finally:
        server.stop()


def test_instances_of_a_static_layout_keep_the_addresses_they_find_each_other_by(
    tmp_path: Path,
) -> None:
    here, there = HostInfo("127.0.0.1", 7071), HostInfo("127.0.0.1", 7072)
    layout = StaticAssignment(
        {here: Assignment({"counts": {0: ACTIVE}}), there: Assignment({"counts": {1: ACTIVE}})}
    )
    app = Application("laid-out", tmp_path, application_server=str(here), assignment=layout)
    app.key_value_store("counts", 2)
    with app:
        assert not app.single_instance
        with pytest.raises(RuntimeError, match="find each other by application_server"):
            app.advertise("127.0.0.1:9999")
        server = start_background(app)
        try:
            hosts = {(i["host"], i["port"]) for i in httpx.get(f"{server.url}/v1/metadata").json()}
            assert hosts == {("127.0.0.1", 7071), ("127.0.0.1", 7072)}
        finally:
            server.stop()


def test_an_address_advertised_before_start_is_the_one_metadata_names(tmp_path: Path) -> None:
    app = Application("early", tmp_path)
    app.key_value_store("counts", 2)
    with pytest.raises(ValueError, match="must look like 'host:port'"):
        app.advertise("no-port")
    app.advertise("serving.example:8080")
    with app:
        [metadata] = app.all_metadata()
        assert metadata.host_info == HostInfo("serving.example", 8080)


@pytest.mark.parametrize("port", [65536, 70000, -1, True, "8080"])
def test_a_port_no_socket_can_bind_is_refused_naming_it(app: Application, port: Any) -> None:
    # The OS would take 70000 modulo 65536 and serve on 4464, not the port asked for.
    with pytest.raises(ValueError, match=f"port must be a number from 1 to 65535.*{port!r}"):
        start_background(app, port=port)
    with pytest.raises(ValueError, match=f"port must be a number from 1 to 65535.*{port!r}"):
        serve(app, port=port)
