"""Connection limits and failures, with bounded raw-socket clients on loopback (SPEC 11).

Limits are set small here so slow clients are cut off quickly; every wait is bounded by a
socket timeout, so a limit that does not hold fails the test instead of hanging it.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import BackgroundServer, ConnectionLimits, start_background

from iqstate import Application, Query
from iqstate.hookspecs import hookimpl
from iqstate.plugins import PluginRegistry, make_plugin_manager

LIMITS = ConnectionLimits(
    max_header_bytes=8 * 1024,
    header_timeout=0.3,
    body_timeout=0.3,
    keep_alive_timeout=0.3,
    max_connections=12,
)
BOUND = 10.0  # seconds any single wait may take before the test fails


@pytest.fixture
def limited(app: Application) -> Iterator[BackgroundServer]:
    server = start_background(app, limits=LIMITS)
    try:
        yield server
    finally:
        server.stop()


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log(limited: BackgroundServer) -> Iterator[list[logging.LogRecord]]:
    """What the server logs (its own logger and uvicorn's), from after it started."""
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("iqstate_http", "uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def connect(server: BackgroundServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by the timeout)."""
    received = b""
    with sock:
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_slow_request_head_is_answered_408_and_closed(limited: BackgroundServer) -> None:
    clients = [connect(limited) for _ in range(8)]
    for sock in clients:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # the head never ends
    for sock in clients:
        answer = until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in answer
    assert httpx.get(limited.url + "/v1/health").status_code == 200


def test_a_trickled_head_does_not_keep_a_connection(limited: BackgroundServer) -> None:
    """Bytes arriving now and then do not reset the deadline of the whole head."""
    sock = connect(limited)
    sock.sendall(b"GET /v1/health HTTP/1.1\r\n")
    for _ in range(int(BOUND / 0.05)):
        if select.select([sock], [], [], 0.05)[0]:
            break
        sock.sendall(b"X-Slow: 1\r\n")
    assert until_closed(sock).startswith(b"HTTP/1.1 408 ")


def test_idle_connections_are_closed(limited: BackgroundServer) -> None:
    never_asked = [connect(limited) for _ in range(8)]
    assert all(until_closed(sock) == b"" for sock in never_asked)
    with httpx.Client(base_url=limited.url) as http:  # idle after an answer (keep-alive)
        assert http.get("/v1/health").status_code == 200
        assert http.get("/v1/health").status_code == 200


def test_oversized_headers_are_refused_with_431(limited: BackgroundServer) -> None:
    for head in (
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000,  # never ends
        b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",  # ends too late
        b"GET /v1/stores/counts/keys/" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n",
    ):
        sock = connect(limited)
        sock.sendall(head)
        answer = until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 431 ") and b"headers_too_large" in answer
    near_the_limit = {"X-Fill": "a" * 7_000}
    assert httpx.get(limited.url + "/v1/health", headers=near_the_limit).status_code == 200


def test_connections_over_the_limit_are_refused(limited: BackgroundServer) -> None:
    held = [connect(limited) for _ in range(LIMITS.max_connections)]
    for sock in held:  # each is registered once it has been answered
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    refused = until_closed(connect(limited))
    assert refused.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in refused
    for sock in held:
        sock.close()
    deadline = time.monotonic() + BOUND
    while (status := httpx.get(limited.url + "/v1/health").status_code) == 503:
        assert time.monotonic() < deadline, "closed connections were never let go"
    assert status == 200


def test_a_slow_upload_is_cut_off_with_one_log_line(
    limited: BackgroundServer, server_log: list[logging.LogRecord]
) -> None:
    head = b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    slow = connect(limited)
    slow.sendall(head + b'{"store": ')
    assert until_closed(slow) == b""
    for _ in range(5):  # clients that give up mid-upload
        with connect(limited) as gone:
            gone.sendall(head + b'{"store": ')
    deadline = time.monotonic() + BOUND
    while len(server_log) < 6:
        assert time.monotonic() < deadline, [r.getMessage() for r in server_log]
        time.sleep(0.01)
    time.sleep(0.2)  # anything else the server would log about them
    assert len(server_log) == 6
    for record in server_log:
        assert record.exc_info is None and "\n" not in record.getMessage()
        assert "ended before its whole POST /v1/query arrived" in record.getMessage()


class FailingQuery(Query[Any]):
    """A plugin query type whose codec has a bug."""


class BrokenCodecPlugin:
    @hookimpl
    def iqstate_register_query_codecs(self, register: Any) -> None:
        def decode(body: Any, key_from_json: Any) -> FailingQuery:
            raise RuntimeError("a bug in a plugin")

        register("failing", FailingQuery, decode, lambda result, to_json: None)


def test_a_500_closes_its_connection_cleanly(tmp_path: Path) -> None:
    """The 500 says `Connection: close`, so a pooled client's next request goes through."""
    manager = make_plugin_manager(extra_plugins=[("broken-codec", BrokenCodecPlugin())])
    app = Application("fails", tmp_path, plugins=PluginRegistry.from_plugin_manager(manager))
    app.key_value_store("s", 1)
    with app:
        server = start_background(app)
        try:
            with httpx.Client(base_url=server.url, timeout=BOUND) as http:
                for _ in range(3):
                    failed = http.post(
                        "/v1/query", json={"store": "s", "query": {"type": "failing"}}
                    )
                    assert failed.status_code == 500
                    assert failed.headers["connection"] == "close"
                    error = failed.json()["error"]
                    assert (
                        error["code"] == "internal_error"
                        and "a bug in a plugin" in error["message"]
                    )
                    assert "Traceback" not in failed.text
                    assert http.get("/v1/stores/s/keys/k").json()["value"] is None
        finally:
            server.stop()


class FieldReadingCodecPlugin:
    @hookimpl
    def iqstate_register_query_codecs(self, register: Any) -> None:
        def decode(body: Any, key_from_json: Any) -> FailingQuery:
            key_from_json(body["prefix"])  # a decoder reading a field the body may lack
            return FailingQuery()

        register("reads_prefix", FailingQuery, decode, lambda result, to_json: None)


def test_a_field_a_plugin_codec_needs_is_a_400_when_missing(tmp_path: Path) -> None:
    manager = make_plugin_manager(extra_plugins=[("reads-prefix", FieldReadingCodecPlugin())])
    app = Application("fields", tmp_path, plugins=PluginRegistry.from_plugin_manager(manager))
    app.key_value_store("s", 1)
    with app:
        server = start_background(app)
        try:
            missing = httpx.post(
                server.url + "/v1/query", json={"store": "s", "query": {"type": "reads_prefix"}}
            )
            assert missing.status_code == 400
            assert missing.json()["error"]["message"] == (
                "malformed 'reads_prefix' query: it has no field 'prefix'"
            )
        finally:
            server.stop()
