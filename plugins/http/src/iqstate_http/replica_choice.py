"""Which replica answers a store partition, for requests that may reach any instance (SPEC 8.1).

The cluster's replicas come from `Application.cluster_status()` (this instance's own lags
from its partitions, the others' as their heartbeats reported them), read again at most
every `max_age` seconds, and at once after `invalidate()` (a forward that failed).

Who may answer, in the order they are asked:
1. the partition's running active;
2. with `acceptable_lag`, the standbys whose lag is within it, least lag first;
3. with `acceptable_lag`, a restoring active whose lag is within it.
Without `acceptable_lag` only the running active answers. A replica of this instance that
may answer goes before the remote ones of its rank, and a local standby within the lag
before a remote active: an answer that needs no hop.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass

from iqstate import Application, FailureReason

RUNNING, RESTORING, STANDBY = "RUNNING", "RESTORING", "STANDBY"


@dataclass(frozen=True)
class Replica:
    """One replica of a store partition: where it is, its state, its lag (None: unknown)."""

    host: str
    local: bool
    state: str
    lag: int | None

    def within(self, acceptable_lag: int | None) -> bool:
        """Whether this replica may answer a request that accepts `acceptable_lag`."""
        if self.state == RUNNING:
            return True
        return acceptable_lag is not None and self.lag is not None and self.lag <= acceptable_lag

    def rank(self) -> tuple[int, int]:
        """The order replicas that may answer are asked in (see the module doc)."""
        if self.local and self.state in (RUNNING, STANDBY):
            return (0, 0)
        tier = {RUNNING: 1, STANDBY: 2}.get(self.state, 3)
        return (tier, self.lag or 0)


@dataclass(frozen=True)
class _View:
    """The cluster's replicas as read once, with the orders worked out from them: replaced
    whole, so that a thread never pairs one reading's table with another's orders."""

    replicas: dict[tuple[str, int], list[Replica]]
    ordered: dict[tuple[str, int, int | None], list[Replica]]
    read_at: float
    generation: int
    """`ReplicaChoice`'s invalidations when the reading started."""


class ReplicaChoice:
    """The replicas of every store partition in the cluster, cached for `max_age` seconds.

    Request threads and the event loop share it: a reading of the cluster is published as
    one `_View`, and an invalidation during a reading makes that reading stale at once."""

    def __init__(self, app: Application, max_age: float = 0.5) -> None:
        self._app = app
        self._max_age = max_age
        self._invalidated = itertools.count(1)
        self._invalidations = 0
        self._view = _View({}, {}, -float("inf"), 0)

    @property
    def this_host(self) -> str:
        return str(self._app.host_info)

    def invalidate(self) -> None:
        """Read the cluster again before the next choice (a replica did not answer)."""
        self._invalidations = next(self._invalidated)  # atomic: no two threads get one

    def _current(self) -> _View:
        view = self._view
        fresh = time.monotonic() - view.read_at <= self._max_age
        if fresh and view.generation == self._invalidations:
            return view
        generation, now = self._invalidations, time.monotonic()  # before the reading
        this = self.this_host
        table: dict[tuple[str, int], list[Replica]] = {}
        for status in self._app.cluster_status():
            if not status.live:
                continue
            host = str(status.host_info)
            for store, partitions in status.replicas.items():
                for partition, replica in partitions.items():
                    table.setdefault((store, partition), []).append(
                        Replica(host, host == this, replica.state, replica.lag)
                    )
        view = self._view = _View(table, {}, now, generation)
        return view

    def replicas(self, store: str, partition: int) -> list[Replica]:
        """Every live replica of the partition, in no particular order."""
        return self._current().replicas.get((store, partition), [])

    def local(self, store: str, partition: int) -> Replica | None:
        """This instance's replica of the partition, if it hosts one."""
        for replica in self.replicas(store, partition):
            if replica.local:
                return replica
        return None

    def here_now(self, store: str, partitions: Iterable[int]) -> dict[int, Replica | None]:
        """This instance's replicas of `partitions` as they are now: state and lag read
        from its own partitions, not from the table (up to `max_age` old, it can still call
        a replica that a rebalance just made a lagging standby `RUNNING`)."""
        asked = list(partitions)
        roles = self._app.roles().get(store, {})
        lags = self._app.local_store_partition_lags(store, asked)
        host = self.this_host
        found: dict[int, Replica | None] = {}
        for partition in asked:
            role, lag = roles.get(partition), lags.get(partition)
            found[partition] = (
                None
                if role is None
                else Replica(host, True, role.state, None if lag is None else lag.offset_lag)
            )
        return found

    def candidates(self, store: str, partition: int, acceptable_lag: int | None) -> list[Replica]:
        """The replicas that may answer, in the order to ask them (see the module doc)."""
        view = self._current()
        ordered = view.ordered.get((store, partition, acceptable_lag))
        if ordered is None:
            replicas = view.replicas.get((store, partition), ())
            eligible = [r for r in replicas if r.within(acceptable_lag)]
            ordered = view.ordered[(store, partition, acceptable_lag)] = sorted(
                eligible, key=Replica.rank
            )
        return ordered

    def local_candidates(
        self, store: str, partition: int, acceptable_lag: int | None
    ) -> list[Replica]:
        """This instance's replica, when it may answer a request of `scope: local` (any
        hosted replica, as Kafka's `KafkaStreams#query`; within `acceptable_lag` if given)."""
        replica = self.local(store, partition)
        if replica is None or (acceptable_lag is not None and not replica.within(acceptable_lag)):
            return []
        return [replica]

    def why_none(
        self, store: str, partition: int, acceptable_lag: int | None, local_only: bool = False
    ) -> tuple[FailureReason, str]:
        """Why no replica of the partition may answer: the failure to report."""
        replicas = self.replicas(store, partition)
        where = f"partition {partition} of store {store!r}"
        if local_only:
            replicas = [r for r in replicas if r.local]
            if not replicas:
                return FailureReason.NOT_PRESENT, f"{where} is not hosted on {self.this_host}"
        if not replicas:
            return FailureReason.NOT_PRESENT, f"no live instance hosts {where}"
        held = ", ".join(
            f"{r.state} on {r.host} (lag {'unknown' if r.lag is None else r.lag})"
            for r in sorted(replicas, key=lambda r: r.host)
        )
        if all(r.lag is None for r in replicas):
            # acceptable_lag cannot help: no lag to compare it with (the broker unreachable,
            # or the replicas just started)
            advice = (
                "; no replica's lag is known, so acceptable_lag admits none: a query with "
                'scope "local" and without acceptable_lag, to an instance that hosts one, '
                "reads that replica as it is, with its position"
            )
        else:
            advice = "; pass acceptable_lag to read a standby" if acceptable_lag is None else ""
        if acceptable_lag is None:
            message = f"{where} has no running active replica ({held}){advice}"
        else:
            message = (
                f"no replica of {where} is running or within acceptable_lag {acceptable_lag} "
                f"({held}){advice}"
            )
        return FailureReason.NOT_ACTIVE, message
