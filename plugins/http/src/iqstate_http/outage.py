"""`Outage`: how long a subscription, or one partition of it, has gone unserved.

The rule both ends of a remote subscription apply, the client to its `reconnect_timeout`
and a merged stream to its `resume_timeout` per partition: time without an open stream,
plus the time of a stream that ended for want of a replica, counts; a stream that served
(a quiet subscription sends no event) or an event ends the outage. So a quiet subscription
rides out failovers at any spacing, and one no instance can serve still ends.
"""

from __future__ import annotations


class Outage:
    """The unserved time of one subscription or partition; times are `time.monotonic()`."""

    def __init__(self) -> None:
        self._before_s = 0.0
        """Unserved seconds before `_waiting_since` (or the current stream)."""
        self._waiting_since: float | None = None
        """Since when no stream is open (None while one is, or before the first break)."""
        self._served_since: float | None = None
        """Since when a stream is open (None while none is)."""

    def opened(self, now: float) -> None:
        """A stream opened: the outage, if any, pauses."""
        if self._waiting_since is not None:
            self._before_s += now - self._waiting_since
            self._waiting_since = None
        self._served_since = now

    def broke(self, now: float, *, served: bool) -> None:
        """The stream ended (or never came): `served` False when it ended for want of a
        replica, so its time was unserved too; True ends the outage before it."""
        opened, self._served_since = self._served_since, None
        if opened is not None:
            self._before_s = 0.0 if served else self._before_s + now - opened
        if self._waiting_since is None:
            self._waiting_since = now

    def served(self) -> None:
        """An event came: whatever went before was an outage that ended."""
        self._before_s = 0.0

    def unserved_s(self, now: float) -> float:
        """The seconds unserved so far."""
        waiting = 0.0 if self._waiting_since is None else now - self._waiting_since
        return self._before_s + waiting
