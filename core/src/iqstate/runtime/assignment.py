"""Which store partitions this instance hosts, and in which role, from a provider.

Every hosted store partition is an *active* replica (running, or restoring while it
catches up) or a *standby* replica. The standalone provider makes this instance the
running active of every partition; other providers (a static one for tests and fixed
deployments, the Kafka plugin's dynamic one) assign partitions across instances and
announce rebalances to their listeners.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from iqstate.runtime.metadata import Departure, HostInfo


class Role(enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"


@dataclass(frozen=True)
class PartitionRole:
    """The role of one hosted store partition."""

    role: Role
    restoring: bool = False
    cut_off: bool = False
    """An active on an instance that has lost contact with its cluster for longer than the
    liveness timeout: the others will have moved the partition, so it is not running here."""
    is_running_active: bool = field(init=False, repr=False, compare=False)
    """An active, neither restoring nor cut off: the replica every query may read (a plain
    attribute, read on every key lookup)."""

    def __post_init__(self) -> None:
        if (self.restoring or self.cut_off) and self.role is not Role.ACTIVE:
            raise ValueError("only an active replica can be restoring or cut off")
        running = self.role is Role.ACTIVE and not self.restoring and not self.cut_off
        object.__setattr__(self, "is_running_active", running)

    @property
    def is_active(self) -> bool:
        return self.role is Role.ACTIVE

    @property
    def state(self) -> str:
        """`RUNNING`, `RESTORING` or `CUT_OFF` (actives) or `STANDBY`, as messages name it."""
        if self.role is Role.STANDBY:
            return "STANDBY"
        if self.cut_off:
            return "CUT_OFF"
        return "RESTORING" if self.restoring else "RUNNING"


ACTIVE = PartitionRole(Role.ACTIVE)
ACTIVE_RESTORING = PartitionRole(Role.ACTIVE, restoring=True)
ACTIVE_CUT_OFF = PartitionRole(Role.ACTIVE, cut_off=True)
STANDBY = PartitionRole(Role.STANDBY)


@dataclass(frozen=True)
class Assignment:
    """One instance's store partitions and their roles: `{store: {partition: role}}`."""

    roles: Mapping[str, Mapping[int, PartitionRole]]

    @classmethod
    def empty(cls) -> Assignment:
        return cls({})

    @classmethod
    def all_active(cls, stores: Mapping[str, int]) -> Assignment:
        return cls({name: dict.fromkeys(range(count), ACTIVE) for name, count in stores.items()})

    def role(self, store: str, partition: int) -> PartitionRole | None:
        return self.roles.get(store, {}).get(partition)

    def items(self) -> Iterator[tuple[str, int, PartitionRole]]:
        for store in sorted(self.roles):
            for partition in sorted(self.roles[store]):
                yield store, partition, self.roles[store][partition]


AssignmentListener = Callable[[Assignment], None]


@dataclass(frozen=True)
class Contact:
    """How long this instance has not heard from its cluster (`silence_s`) and how long it
    may before the others count it gone (`limit_s`, the liveness timeout)."""

    silence_s: float
    limit_s: float

    @property
    def lost(self) -> bool:
        """Silent for longer than the limit: the others will have moved this instance's
        partitions, and its view of the cluster and its lags are out of date."""
        return self.silence_s > self.limit_s


class AssignmentProvider(ABC):
    """Tells an instance what it hosts and what the other instances host."""

    def __init__(self) -> None:
        self._listeners: list[AssignmentListener] = []

    def host_everywhere(self, stores: frozenset[str]) -> None:  # noqa: B027 (a hook)
        """Called before `start` with the global stores: their one partition is hosted by
        every instance as an active (an instance alone hosts everything already)."""

    @abstractmethod
    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        """Called once by `Application.start()` with the declared stores' partition counts."""

    @abstractmethod
    def assignment(self) -> Assignment:
        """This instance's current assignment."""

    @abstractmethod
    def cluster(self) -> Mapping[HostInfo, Assignment]:
        """Every known instance's assignment, this instance included."""

    def end_offset(self, store: str, partition: int) -> int | None:
        """The end of a store partition's changelog, when the provider knows it."""
        return None

    def reported_lags(self) -> Mapping[HostInfo, Mapping[tuple[str, int], int]]:
        """The lag every other instance last reported per replica it hosts, when the
        provider carries such reports (distributed mode); this instance's own lags come from
        its hosted partitions instead."""
        return {}

    def departures(self) -> Mapping[HostInfo, Departure]:
        """Instances that recently left or went silent and have not come back."""
        return {}

    def contact(self) -> Contact | None:
        """How long since this instance last heard from its cluster; `None` when there is
        no cluster to lose contact with (one machine, a fixed layout)."""
        return None

    def add_listener(self, listener: AssignmentListener) -> None:
        """`listener(new_assignment)` runs on every rebalance of this instance."""
        self._listeners.append(listener)

    def _announce(self, assignment: Assignment) -> None:
        for listener in list(self._listeners):
            listener(assignment)

    def leave(self) -> float:
        """Tell the other instances this one is going, before it closes: they take its
        partitions over while it keeps hosting and answering them, and it hears of no
        change any more. The seconds until they have; 0 with nobody to tell (the default)."""
        return 0.0

    def close(self) -> None:
        self._listeners.clear()


class StandaloneAssignment(AssignmentProvider):
    """One instance, running active for every partition of every store."""

    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        self._host = this_host
        self._assignment = Assignment.all_active(stores)

    def serve_at(self, this_host: HostInfo) -> None:
        """Name `this_host` as the instance's address from now on (no other instance knows
        it, so nothing moves)."""
        self._host = this_host

    def assignment(self) -> Assignment:
        return self._assignment

    def cluster(self) -> Mapping[HostInfo, Assignment]:
        return {self._host: self._assignment}


class StaticAssignment(AssignmentProvider):
    """A fixed assignment of store partitions to instances, changed only by `rebalance`.

    For deployments with a known layout and for tests: every instance is given the same
    cluster map and finds its own entry by its `application_server`.
    """

    def __init__(
        self,
        cluster: Mapping[HostInfo, Assignment],
        end_offsets: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._cluster = dict(cluster)
        self._end_offsets = dict(end_offsets or {})
        self._host: HostInfo | None = None

    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        for host, assignment in self._cluster.items():
            for store, partition, _ in assignment.items():
                if store not in stores:
                    raise ValueError(f"static assignment for {host} names unknown store {store!r}")
                if not 0 <= partition < stores[store]:
                    raise ValueError(
                        f"static assignment for {host} names partition {partition} of store "
                        f"{store!r}, which has {stores[store]} partitions"
                    )
        self._host = this_host

    def assignment(self) -> Assignment:
        with self._lock:
            if self._host is None:
                return Assignment.empty()
            return self._cluster.get(self._host, Assignment.empty())

    def cluster(self) -> Mapping[HostInfo, Assignment]:
        with self._lock:
            return dict(self._cluster)

    def end_offset(self, store: str, partition: int) -> int | None:
        with self._lock:
            return self._end_offsets.get((store, partition))

    def set_end_offset(self, store: str, partition: int, offset: int) -> None:
        with self._lock:
            self._end_offsets[(store, partition)] = offset

    def rebalance(self, cluster: Mapping[HostInfo, Assignment]) -> None:
        """Install a new cluster map and tell this instance its new assignment."""
        with self._lock:
            self._cluster = dict(cluster)
        self._announce(self.assignment())
