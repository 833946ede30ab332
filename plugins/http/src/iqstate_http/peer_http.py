"""HTTP/1.1 between instances: kept-alive connections per host, one request at a time on
each, responses parsed by httptools (the parser uvicorn serves with).

A forwarded request is on the critical path of every lookup sent to an instance that does
not hold the key. A general client (aiohttp's) spent about 150 us of CPU on each loopback
request, more than the owner spent answering it; this does only what forwarding needs:
write the request in one buffer, parse the status and body, keep the connection.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict
from typing import NamedTuple

import httptools


class PeerResponse(NamedTuple):
    status: int
    body: bytes


class PeerConnectionLost(ConnectionError):
    """The other instance closed the connection before its answer was whole."""


class _Connection(asyncio.Protocol):
    """One connection to a peer: a request written, its response parsed, then the next."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[PeerResponse] | None = None
        self._body: list[bytes] = []
        self.reusable = False
        self.closed = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(PeerConnectionLost(f"a malformed answer: {error}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(PeerConnectionLost("the connection closed before the answer was whole"))

    # -- httptools callbacks ---------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self.reusable = self._parser.should_keep_alive()
        body, self._body = b"".join(self._body), []
        if waiter is not None and not waiter.done():
            waiter.set_result(PeerResponse(self._parser.get_status_code(), body))

    # -- use ---------------------------------------------------------------------------------

    def send(self, request: bytes) -> asyncio.Future[PeerResponse]:
        assert self._transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.reusable = False
        self._transport.write(request)
        return self._waiter

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class PeerConnections:
    """Requests to the other instances over pooled connections, at most `max_connections`
    at once, each within `timeout` seconds (connecting included). Use from one event loop."""

    def __init__(self, timeout: float, max_connections: int, tls: ssl.SSLContext | None) -> None:
        self._timeout = timeout
        self._tls = tls
        self._idle: defaultdict[str, list[_Connection]] = defaultdict(list)
        self._slots = asyncio.Semaphore(max_connections)

    async def request(
        self, method: str, host: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> PeerResponse:
        """Send `method target` to `host` (`name:port`). `OSError` (a refused connection, a
        TLS failure, the connection lost), `TimeoutError`: no answer."""
        request = _request_bytes(method, host, target, headers, body)
        async with self._slots, asyncio.timeout(self._timeout):
            connection, reused = await self._connection(host)
            try:
                return await self._exchange(host, connection, request)
            except PeerConnectionLost:
                if not reused:
                    raise
            # a kept-alive connection the peer had closed: once more, on another
            connection, _ = await self._connection(host)
            return await self._exchange(host, connection, request)

    async def _exchange(self, host: str, connection: _Connection, request: bytes) -> PeerResponse:
        """`request` on `connection`, which is kept for the next when the answer allows."""
        try:
            response = await connection.send(request)
        except BaseException:  # lost, timed out or cancelled: the answer may still come
            connection.close()
            raise
        if connection.reusable and not connection.closed:
            self._idle[host].append(connection)
        else:
            connection.close()
        return response

    async def _connection(self, host: str) -> tuple[_Connection, bool]:
        """A kept-alive connection to `host`, or a new one; and whether it was kept."""
        idle = self._idle[host]
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection, True
        name, _, port = host.rpartition(":")
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            _Connection,
            name,
            int(port),
            ssl=self._tls,
            server_hostname=name if self._tls is not None else None,
        )
        return connection, False

    def close(self) -> None:
        """Close every kept connection."""
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()


def _request_bytes(
    method: str, host: str, target: str, headers: dict[str, str], body: bytes | None
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a forwarded request's target or headers hold a line break")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")
