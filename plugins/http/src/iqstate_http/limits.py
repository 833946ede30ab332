"""How much a connection may take from the server: bytes, time, and how many at once."""

from __future__ import annotations

import resource
from dataclasses import dataclass, field

DEFAULT_MAX_BODY = 1024 * 1024
"""Request bodies over this many bytes are answered 413 (the service's `max_body`)."""

MIN_HEADER_BYTES = 1024
"""The smallest `max_header_bytes`: a browser sends 500-800 bytes of headers, a client
with a token a few hundred."""

DEFAULT_MAX_ROWS = 100_000
"""Unmerged range answers over this many rows are answered 422 (the service's `max_rows`)."""

MAX_LIMIT = 100_000
"""The most rows a merged page may hold (`"limit"`; the routing client's `page_size`)."""


def _default_max_connections() -> int:
    """1,000, or half the process's file descriptor limit if that is lower: the stores'
    files need descriptors too, and a full table stalls every request."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1000
    return max(8, min(1000, soft // 2))


@dataclass(frozen=True)
class ConnectionLimits:
    """Limits each connection to the service is held to.

    * `max_header_bytes`: a request's line and headers together; more is answered 431.
    * `header_timeout`: seconds a connection has, from opening or from its last response,
      to send a complete request line and headers; an idle or slow one is answered 408
      and closed.
    * `body_timeout`: seconds from the end of the headers to the end of the body; a slower
      upload is cut off.
    * `keep_alive_timeout`: seconds an idle keep-alive connection stays open.
    * `max_connections`: open connections at once; one more is answered 503 and closed.
    """

    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    max_connections: int = field(default_factory=_default_max_connections)

    def __post_init__(self) -> None:
        if self.max_header_bytes < MIN_HEADER_BYTES:
            raise ValueError(
                f"ConnectionLimits.max_header_bytes must be at least {MIN_HEADER_BYTES}, got "
                f"{self.max_header_bytes}: a browser's or a client's ordinary headers would "
                "get 431"
            )
        if self.max_connections < 1:
            raise ValueError("ConnectionLimits.max_connections must be at least 1")
        for name in ("header_timeout", "body_timeout", "keep_alive_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ConnectionLimits.{name} must be a positive number of seconds")
