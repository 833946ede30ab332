"""uvicorn's httptools protocol, held to `ConnectionLimits`.

uvicorn times a connection out only while it is idle between requests, and only once it
has answered one; it has no limit on the size of headers (httptools buffers a header value
until it ends) nor on the number of connections. Here each connection must send its
request head within `header_timeout` of opening or of its previous response, in at most
`max_header_bytes`, and its body within `body_timeout`; beyond `max_connections` a new
connection is answered 503 and closed, so idle sockets cannot use up the descriptors.
"""

from __future__ import annotations

import asyncio
import json
from asyncio import TimerHandle
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from iqstate_http.limits import ConnectionLimits

_HEAD_END = b"\r\n\r\n"
_LINGER = 1.0  # seconds a refused connection is read (and dropped) before it is closed
_REASONS = {
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _closing_response(status: int, code: str, message: str) -> bytes:
    """A whole JSON error response that ends the connection, written without the app."""
    error = {"error": {"code": code, "message": message}}
    body = json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()  # as every route
    return (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """One connection: uvicorn's protocol plus the limits (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ConnectionLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self._refused = False
        self._deadline: float | None = None  # loop time by which the current phase must end
        self._timer: TimerHandle | None = None  # fires at or before the deadline
        self._timer_at = 0.0
        self._reading_head = True  # between requests or within a request line and headers
        self._reading_body = False
        self._head_bytes = 0
        self._tail = b""  # the last bytes of the head so far: a terminator may span chunks
        self._discarding = False  # refused: reading only so the client sees the answer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            message = f"the server has {self.limits.max_connections} connections open"
            transport.write(_closing_response(503, "too_many_connections", message))
            transport.close()
            return
        super().connection_made(transport)
        self._arm(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if not self._reading_head:
            super().data_received(data)
            return
        budget = self.limits.max_header_bytes - self._head_bytes
        if len(data) > budget and _HEAD_END not in self._tail + data[: max(budget, 0) + 4]:
            limit = self.limits.max_header_bytes
            self._refuse(431, "headers_too_large", f"request headers over {limit} bytes")
            return
        self._head_bytes += len(data)
        super().data_received(data)
        if self._reading_head and self._head_bytes:  # the head goes on in the next chunk
            self._tail = data[-3:]

    # -- parser callbacks: where each request's head and body begin and end ----------------

    def on_headers_complete(self) -> None:
        self._reading_head, self._reading_body = False, True
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_head, self._reading_body = True, False
        self._head_bytes, self._tail = 0, b""
        self._deadline = None  # the server's turn: no deadline until it has answered
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(self.limits.header_timeout)

    # -- deadlines --------------------------------------------------------------------------
    # Moving a deadline is an assignment: the one timer, when it fires early, sleeps again
    # until the deadline, so a busy keep-alive connection costs no timer per request.

    def _arm(self, seconds: float) -> None:
        self._deadline = deadline = self.loop.time() + seconds
        if self._timer is not None and deadline < self._timer_at:
            self._timer.cancel()  # it would fire too late
            self._timer = None
        if self._timer is None:
            self._timer, self._timer_at = self.loop.call_at(deadline, self._expire), deadline

    def _expire(self) -> None:
        self._timer = None
        if self._deadline is None or self.transport.is_closing():
            return
        if self._deadline > self.loop.time():
            self._timer = self.loop.call_at(self._deadline, self._expire)
            self._timer_at = self._deadline
            return
        self._deadline = None
        if self._discarding or self._reading_body or (self._reading_head and not self._head_bytes):
            # Refused, cut off mid-upload (the app sees a disconnect), or idle: just close.
            self.transport.close()
        elif self._reading_head and (self.cycle is None or self.cycle.response_complete):
            limit = self.limits.header_timeout
            self._refuse(408, "request_timeout", f"no complete request head within {limit} s")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer `status` (unless a response is under way) and end the connection.

        Closing a socket with unread input resets it, and a reset can destroy the answer
        before the client reads it; so the server half-closes, reads and drops what the
        client still sends for a moment, then closes.
        """
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_closing_response(status, code, message))
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._discarding = True
        self._arm(_LINGER)
