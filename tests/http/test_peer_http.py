"""The client instances forward with (`iqstate_http.peer_http`), against raw servers that
answer well, badly, late or not at all: every way must end in an answer or an `OSError` /
`TimeoutError` the forwarder maps to a per-partition failure, never a hang or a wrong body."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from iqstate_http.peer_http import PeerConnections

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"


async def serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    """A server on a free loopback port; the list counts the connections it accepted."""
    accepted: list[int] = []

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(counted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}", accepted


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = [
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.startswith(b"content-length")
    ]
    return head + (await reader.readexactly(length[0]) if length else b"")


async def answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(OK)
        await writer.drain()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_requests_share_one_kept_connection_and_send_what_they_were_given() -> None:
    seen: list[bytes] = []

    async def recording(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                return
            writer.write(OK)
            await writer.drain()

    async def test() -> None:
        server, host, accepted = await serve(recording)
        peers = PeerConnections(5.0, 4, None)
        first = await peers.request("GET", host, "/v1/a?x=1", {"authorization": "Bearer t"}, None)
        second = await peers.request("POST", host, "/v1/query", {}, b'{"k":1}')
        assert first == (200, b"hello") and second == (200, b"hello")
        assert len(accepted) == 1
        peers.close()
        server.close()

    run(test)
    assert seen[0].startswith(b"GET /v1/a?x=1 HTTP/1.1\r\n")
    assert b"\r\nauthorization: Bearer t\r\n" in seen[0]
    assert seen[1].endswith(b'content-length: 7\r\n\r\n{"k":1}')


def test_a_kept_connection_the_peer_closed_is_replaced_once() -> None:
    async def one_answer_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(OK)  # says nothing of closing, then closes (a keep-alive timeout)
        await writer.drain()

    async def test() -> None:
        server, host, accepted = await serve(one_answer_then_close)
        peers = PeerConnections(5.0, 4, None)
        assert await peers.request("GET", host, "/", {}, None) == (200, b"hello")
        await asyncio.sleep(0.05)
        assert await peers.request("GET", host, "/", {}, None) == (200, b"hello")
        assert len(accepted) == 2
        server.close()

    run(test)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\ncut short",  # closed mid-body
        b"HTTP/1.1 200 OK\r\ncontent-le",  # closed mid-head
        b"SMTP ready\r\n\r\n",  # not HTTP
        b"",  # closed at once
    ],
)
def test_an_answer_that_is_not_whole_is_an_error_never_a_body(answer: bytes) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    async def test() -> None:
        server, host, _ = await serve(broken)
        peers = PeerConnections(5.0, 4, None)
        with pytest.raises(OSError):
            await peers.request("GET", host, "/", {}, None)
        server.close()

    run(test)


def test_a_peer_that_never_answers_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(30)

    async def test() -> None:
        server, host, _ = await serve(silent)
        peers = PeerConnections(0.3, 4, None)
        with pytest.raises(TimeoutError):
            await peers.request("GET", host, "/", {}, None)
        server.close()

    run(test)


def test_a_refused_connection_is_an_os_error() -> None:
    async def test() -> None:
        server, host, _ = await serve(answering)
        server.close()
        await server.wait_closed()
        with pytest.raises(OSError):
            await PeerConnections(5.0, 4, None).request("GET", host, "/", {}, None)

    run(test)


def test_chunked_bodies_and_closing_answers() -> None:
    async def chunked_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n4\r\nbusy\r\n3\r\n!!!\r\n0\r\n\r\n"
        )
        await writer.drain()

    async def test() -> None:
        server, host, accepted = await serve(chunked_then_close)
        peers = PeerConnections(5.0, 4, None)
        assert await peers.request("GET", host, "/", {}, None) == (503, b"busy!!!")
        assert await peers.request("GET", host, "/", {}, None) == (503, b"busy!!!")
        assert len(accepted) == 2  # `connection: close` is not kept
        server.close()

    run(test)


def test_a_line_break_in_a_target_or_header_is_refused() -> None:
    async def test() -> None:
        peers = PeerConnections(5.0, 4, None)
        with pytest.raises(ValueError, match="line break"):
            await peers.request("GET", "127.0.0.1:1", "/a\r\nx: y", {}, None)
        with pytest.raises(ValueError, match="line break"):
            await peers.request("GET", "127.0.0.1:1", "/", {"authorization": "a\nb"}, None)

    run(test)
