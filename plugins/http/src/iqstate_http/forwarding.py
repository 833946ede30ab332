"""Requests one instance sends another on a caller's behalf (SPEC 8.1).

A forwarded request carries `x-iqstate-forwarded`, and an instance answers such a request
from its own replicas only: one hop at most, never a loop. The caller's `Authorization`
header goes with it. Connections are pooled and kept alive, one pool per service. Every
way a forwarded request can fail (refused connection, timeout, an error answer) comes
back as a `ForwardFailure` the caller turns into per-partition failures.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any

import anyio.from_thread

from iqstate_http.error_text import error_text
from iqstate_http.peer_http import PeerConnections

FORWARDED_HEADER = "x-iqstate-forwarded"


@dataclass(frozen=True)
class ForwardFailure:
    """A forwarded request that got no usable answer: `code` is the failure's reason in
    the API's spelling (`not_present`, `not_active`, `not_up_to_bound`, ...), `message`
    says which instance and what happened; `unreachable` when no answer came at all."""

    code: str
    message: str
    unreachable: bool = False
    status: int = 503
    partitions: dict[str, Any] | None = None
    """Per-partition failures a merged page's 503 named, by partition number."""


@dataclass(frozen=True)
class Forwarded:
    """A forwarded request's successful answer: its status and body."""

    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Forwarder:
    """Sends forwarded requests over one pool of keep-alive connections
    (`iqstate_http.peer_http`)."""

    def __init__(
        self,
        timeout: float = 10.0,
        max_connections: int = 64,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the other instances speak TLS, verified with this context (the cluster is
        all TLS or all plain)."""
        self._tls = tls
        self._timeout = timeout
        self._max_connections = max_connections
        self._peers: PeerConnections | None = None
        self.sent = 0
        """Requests forwarded so far (counted in the server's event loop, one thread)."""

    def _connections(self) -> PeerConnections:
        if self._peers is None:  # made in the server's event loop, on first use
            self._peers = PeerConnections(self._timeout, self._max_connections, self._tls)
        return self._peers

    async def aclose(self) -> None:
        if self._peers is not None:
            self._peers.close()
            self._peers = None

    @staticmethod
    def _headers(authorization: str | None) -> dict[str, str]:
        headers = {FORWARDED_HEADER: "1"}
        if authorization is not None:
            headers["authorization"] = authorization
        return headers

    async def get(
        self, host: str, path: str, authorization: str | None
    ) -> Forwarded | ForwardFailure:
        """`GET <scheme>://host{path}` (path with its query string), forwarded."""
        return await self._send("GET", host, path, None, authorization)

    async def post(
        self, host: str, path: str, body: dict[str, Any], authorization: str | None
    ) -> Forwarded | ForwardFailure:
        """`POST <scheme>://host{path}` with a JSON body, forwarded."""
        return await self._send("POST", host, path, body, authorization)

    def post_from_thread(
        self, host: str, path: str, body: dict[str, Any], authorization: str | None
    ) -> Forwarded | ForwardFailure:
        """`post`, called from one of the server's worker threads."""
        return anyio.from_thread.run(self.post, host, path, body, authorization)

    def post_all_from_thread(
        self, calls: list[tuple[str, dict[str, Any]]], authorization: str | None
    ) -> list[Forwarded | ForwardFailure]:
        """`post` of each `(host, body)` to `/v1/query`, at once, from a worker thread."""

        async def post_all() -> list[Forwarded | ForwardFailure]:
            return list(
                await asyncio.gather(
                    *(self.post(host, "/v1/query", body, authorization) for host, body in calls)
                )
            )

        return anyio.from_thread.run(post_all)

    async def _send(
        self,
        method: str,
        host: str,
        path: str,
        body: dict[str, Any] | None,
        authorization: str | None,
    ) -> Forwarded | ForwardFailure:
        self.sent += 1
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers(authorization)
        if data is not None:
            headers["content-type"] = "application/json"
        try:
            status, content = await self._connections().request(method, host, path, headers, data)
        except (OSError, TimeoutError) as error:
            return ForwardFailure(
                "not_present",
                f"instance {host} could not be reached: {error_text(error)}",
                unreachable=True,
            )
        if status == 200:
            return Forwarded(200, content)
        return _failure_of(host, status, content)


def _failure_of(host: str, status: int, content: bytes) -> ForwardFailure:
    """An error answer of `host` as a failure: its code and message when it sent JSON."""
    try:
        error = json.loads(content)["error"]
        code, message = str(error["code"]), str(error["message"])
        partitions = error.get("partitions")
    except (ValueError, KeyError, TypeError):
        code, message, partitions = "http_error", content[:200].decode(errors="replace"), None
    if status != 503:
        message = f"instance {host} answered {status} ({code}): {message}"
        code = "not_present" if status >= 500 else code
    return ForwardFailure(code, message, status=status, partitions=partitions)
