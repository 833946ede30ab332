"""How many range requests an instance works on at once (issue: 200 concurrent full ranges
once took an instance from 336 MiB to 9.8 GB).

A range request holds up to a page of rows while it runs, so at most `max_active` run at
once; up to `max_waiting` more wait, each at most `wait_timeout` seconds, and any beyond
that, or one that waited too long, is answered `503 busy` with `Retry-After`. Requests
forwarded by other instances are admitted by a second, equal gate: they never forward
again, so a request waiting for a forwarded one can never wait on itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from iqstate_http.errors import ApiError


@dataclass(frozen=True)
class RangeLimits:
    """Range requests at once (`max_active`), waiting (`max_waiting`), and how long one
    waits (`wait_timeout`, seconds) before it is answered 503."""

    max_active: int = 4
    max_waiting: int = 256
    wait_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.max_active < 1 or self.max_waiting < 0:
            raise ValueError("RangeLimits: max_active must be >= 1 and max_waiting >= 0")
        if not self.wait_timeout > 0:
            raise ValueError("RangeLimits.wait_timeout must be a positive number of seconds")


class Gate:
    """Admits at most `limits.max_active` requests at once (see the module doc)."""

    def __init__(self, limits: RangeLimits) -> None:
        self._limits = limits
        self._slots: asyncio.Semaphore | None = None  # made in the server's loop
        self._waiting = 0

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        limits = self._limits
        if self._slots is None:
            self._slots = asyncio.Semaphore(limits.max_active)
        slots = self._slots
        if slots.locked():
            if self._waiting >= limits.max_waiting:
                raise _busy(f"{limits.max_active} range requests are running and "
                            f"{self._waiting} waiting")  # fmt: skip
            self._waiting += 1
            try:
                await asyncio.wait_for(slots.acquire(), limits.wait_timeout)
            except TimeoutError:
                raise _busy(
                    f"no room for another range request within {limits.wait_timeout} s"
                ) from None
            finally:
                self._waiting -= 1
        else:
            await slots.acquire()
        try:
            yield
        finally:
            slots.release()


def _busy(message: str) -> ApiError:
    return ApiError(503, "busy", message + "; retry later", {"Retry-After": "1"})
