"""Who hosts which store partition, in which role: a pure function of the live members.

Every instance runs `assign` on the same member reports (read from the members topic) and so
computes the same assignment: no coordinator, no randomness, no clock; every choice is ordered
by member id and partition. The rules (SPEC 9), in the spirit of Kafka Streams'
`HighAvailabilityTaskAssignor`:

1. **Current owners.** A partition's current active is the member that reports serving it as
   active (when several do, for a moment, the caught-up one with the smallest member id).
2. **Quotas.** With `n` members and `P` partitions every member may own `P // n` actives, and
   `P % n` of them one more: those that currently own the most (then by member id), so that
   balance moves as little as possible.
3. **Target.** Each member keeps its current actives up to its quota, caught-up ones first,
   then in partition order (never by exact lag, which changes all the time and would move
   partitions back and forth). Every other partition goes to a member under its quota: a
   caught-up one first, then one that hosts a replica, then the least loaded, then by member
   id; partitions with the fewest caught-up replicas are placed first. The target is
   balanced: active counts differ by at most one.
4. **Actives.** A partition's active is its target if the target is caught up (lag at most
   `acceptable_recovery_lag`). Otherwise, if other members are caught up, one of them stays or
   becomes active (the current active if it is one of them, else the least loaded), and the
   target gets a *warm-up* replica: it restores as a standby and takes the partition over once
   it has caught up. With nobody caught up, a replica that lags less than the target does is
   preferred the same way (the current active, else the least lagging); failing that the
   target itself becomes active (there is nothing better to restore from). So a failover
   promotes a warm standby, never a cold instance, and a new instance takes actives only
   after warming up. Exact lags matter only among replicas that are not caught up: within
   `acceptable_recovery_lag` every replica counts the same, so lags that move (as they do all
   the time) move no partition.
5. **Standbys.** Each partition gets `min(num_standby_replicas, n - 1)` standbys on members
   other than its active: members under their share of standbys first, then caught-up ones,
   then ones hosting a replica, then the least loaded, then by member id. Then standbys move
   from the most to the least loaded members, where the move costs no warmth, until the
   counts differ by at most one or no such move is left (with everyone caught up, they differ
   by at most one). A warm-up replica is added on top when it is not one of the standbys.

Members sharing a host (a misconfiguration, or a restarted process whose previous incarnation
has not yet been dropped) cannot both serve one endpoint: the one with the smallest member id
counts, the others get nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from iqstate.runtime.assignment import ACTIVE, STANDBY, Assignment, PartitionRole
from iqstate.runtime.batch import StorePartition
from iqstate.runtime.metadata import HostInfo


@dataclass(frozen=True)
class Member:
    """What the assignor knows of one live instance.

    `member_id`: unique per process incarnation. `lags`: for each store partition it hosts a
    replica of, how many offsets that replica is behind the end of its changelog (absent: no
    replica, or not known). `actives`: the partitions it currently serves as active.
    """

    member_id: str
    host: HostInfo
    lags: Mapping[StorePartition, int] = field(default_factory=dict)
    actives: frozenset[StorePartition] = frozenset()


def assign(
    members: Iterable[Member],
    stores: Mapping[str, int],
    num_standby_replicas: int,
    acceptable_recovery_lag: int,
    everywhere: frozenset[str] = frozenset(),
) -> dict[HostInfo, Assignment]:
    """Each live member's assignment (roles `ACTIVE` or `STANDBY`), keyed by its host.

    `stores`: store name -> partition count. Every member counted appears in the result, with
    an empty assignment if it hosts nothing. The partitions of the stores in `everywhere`
    (global stores) are every member's, as actives.
    """
    if num_standby_replicas < 0:
        raise ValueError(f"num_standby_replicas must be >= 0, got {num_standby_replicas!r}")
    if acceptable_recovery_lag < 0:
        raise ValueError(f"acceptable_recovery_lag must be >= 0, got {acceptable_recovery_lag!r}")
    live = _one_per_host(members)
    if not live:
        return {}
    partitions = [
        (store, number)
        for store in sorted(stores)
        if store not in everywhere
        for number in range(stores[store])
    ]
    plan = _Plan(live, partitions, acceptable_recovery_lag)
    current = plan.current_owners()
    target = plan.target(current)
    actives, warmups = plan.actives(current, target)
    standbys = plan.standbys(actives, warmups, min(num_standby_replicas, len(live) - 1))
    roles: dict[str, dict[str, dict[int, PartitionRole]]] = {
        m.member_id: {store: dict.fromkeys(range(stores[store]), ACTIVE) for store in everywhere}
        for m in live
    }
    for (store, number), owner in actives.items():
        roles[owner].setdefault(store, {})[number] = ACTIVE
    for (store, number), hosts in standbys.items():
        for member_id in hosts:
            roles[member_id].setdefault(store, {})[number] = STANDBY
    return {m.host: Assignment(roles[m.member_id]) for m in live}


def _one_per_host(members: Iterable[Member]) -> list[Member]:
    """The members that count, sorted by member id: the first of each host."""
    seen: set[HostInfo] = set()
    live = []
    for member in sorted(members, key=lambda m: m.member_id):
        if member.host not in seen:
            seen.add(member.host)
            live.append(member)
    return live


class _Plan:
    """The steps of one assignment over fixed members and partitions (see the module doc)."""

    def __init__(
        self, members: list[Member], partitions: list[StorePartition], acceptable_lag: int
    ) -> None:
        self._members = members
        self._ids = [m.member_id for m in members]
        self._lags = {m.member_id: m.lags for m in members}
        self._claims = {m.member_id: m.actives for m in members}
        self._partitions = partitions
        self._acceptable = acceptable_lag

    def _lag(self, member_id: str, partition: StorePartition) -> float:
        """The member's lag on `partition`; infinite without a replica."""
        lag = self._lags[member_id].get(partition)
        return math.inf if lag is None else lag

    def _caught_up(self, member_id: str, partition: StorePartition) -> bool:
        return self._lag(member_id, partition) <= self._acceptable

    def _behind(self, member_id: str, partition: StorePartition) -> float:
        """The lag beyond caught up: 0 for every caught-up replica, so that lags that move
        within `acceptable_recovery_lag` (as they do all the time) never move a partition."""
        return 0 if self._caught_up(member_id, partition) else self._lag(member_id, partition)

    def _hosts(self, member_id: str, partition: StorePartition) -> bool:
        return partition in self._lags[member_id]

    def current_owners(self) -> dict[StorePartition, str]:
        owners = {}
        for partition in self._partitions:
            claimants = [i for i in self._ids if partition in self._claims[i]]
            if claimants:
                owners[partition] = min(
                    claimants, key=lambda i: (not self._caught_up(i, partition), i)
                )
        return owners

    def _quotas(self, current: Mapping[StorePartition, str]) -> dict[str, int]:
        base, extra = divmod(len(self._partitions), len(self._ids))
        owned = {i: 0 for i in self._ids}
        for owner in current.values():
            owned[owner] += 1
        ranked = sorted(self._ids, key=lambda i: (-owned[i], i))
        return {member_id: base + (rank < extra) for rank, member_id in enumerate(ranked)}

    def target(self, current: Mapping[StorePartition, str]) -> dict[StorePartition, str]:
        """A balanced owner per partition, as sticky as the quotas allow."""
        quota = self._quotas(current)
        target: dict[StorePartition, str] = {}
        load = dict.fromkeys(self._ids, 0)
        for member_id in self._ids:
            claimed = sorted(
                (p for p, owner in current.items() if owner == member_id),
                key=lambda p: (not self._caught_up(member_id, p), p),
            )
            for partition in claimed[: quota[member_id]]:
                target[partition] = member_id
                load[member_id] += 1
        rest = sorted(
            (p for p in self._partitions if p not in target),
            key=lambda p: (sum(self._caught_up(i, p) for i in self._ids), p),
        )
        for partition in rest:
            owner = min(
                (i for i in self._ids if load[i] < quota[i]),
                key=lambda i: (
                    not self._caught_up(i, partition),
                    not self._hosts(i, partition),
                    load[i],
                    i,
                ),
            )
            target[partition] = owner
            load[owner] += 1
        return target

    def actives(
        self, current: Mapping[StorePartition, str], target: Mapping[StorePartition, str]
    ) -> tuple[dict[StorePartition, str], dict[StorePartition, str]]:
        """Each partition's active, and the warm-up replica of each partition whose target is
        not (yet) the best replica to serve it."""
        actives: dict[StorePartition, str] = {}
        overridden: list[tuple[StorePartition, list[str]]] = []
        for partition in self._partitions:
            owner = target[partition]
            if self._caught_up(owner, partition):
                actives[partition] = owner
                continue
            better = [i for i in self._ids if self._caught_up(i, partition)] or [
                i for i in self._ids if self._lag(i, partition) < self._lag(owner, partition)
            ]
            if better:
                overridden.append((partition, better))
            else:
                actives[partition] = owner
        load = dict.fromkeys(self._ids, 0)
        for owner in actives.values():
            load[owner] += 1
        warmups = {}
        for partition, better in overridden:
            if current.get(partition) in better:
                chosen = current[partition]
            else:
                chosen = min(better, key=lambda i: (self._behind(i, partition), load[i], i))
            actives[partition] = chosen
            load[chosen] += 1
            warmups[partition] = target[partition]
        return {p: actives[p] for p in self._partitions}, warmups

    def _rank(self, member_id: str, partition: StorePartition) -> tuple[bool, bool]:
        """How good a place for a replica of `partition` the member is (smaller is better)."""
        return (not self._caught_up(member_id, partition), not self._hosts(member_id, partition))

    def standbys(
        self,
        actives: Mapping[StorePartition, str],
        warmups: Mapping[StorePartition, str],
        count: int,
    ) -> dict[StorePartition, list[str]]:
        """`count` standbys per partition, never on its active, plus its warm-up replica."""
        share = math.ceil(count * len(self._partitions) / len(self._ids))
        load = dict.fromkeys(self._ids, 0)
        standbys: dict[StorePartition, list[str]] = {}
        for partition in self._partitions:
            chosen = standbys[partition] = []
            for _ in range(count):
                pick = min(
                    (i for i in self._ids if i != actives[partition] and i not in chosen),
                    key=lambda i: (load[i] >= share, self._rank(i, partition), load[i], i),
                )
                chosen.append(pick)
                load[pick] += 1
        self._even_out(standbys, actives, load)
        for partition, warm in warmups.items():
            if warm not in standbys[partition]:
                standbys[partition].append(warm)
        return standbys

    def _even_out(
        self,
        standbys: dict[StorePartition, list[str]],
        actives: Mapping[StorePartition, str],
        load: dict[str, int],
    ) -> None:
        """Move standbys from the most loaded members towards the least loaded while counts
        differ by more than one, never to a worse place for the replica.

        A move may need a chain (the heaviest member's standbys are all on partitions the
        lightest one hosts already): the shortest chain of moves, each to a member that can
        take that partition, from a heaviest member to one at least two lighter, found
        breadth first in member id and partition order. Each chain lowers one count and raises
        another, so this ends.
        """
        while True:
            heaviest = max(load.values())
            chain = self._chain(standbys, actives, load, heaviest)
            if chain is None:
                return
            for partition, source, sink in chain:
                chosen = standbys[partition]
                chosen[chosen.index(source)] = sink
            load[chain[0][1]] -= 1
            load[chain[-1][2]] += 1

    def _chain(
        self,
        standbys: Mapping[StorePartition, list[str]],
        actives: Mapping[StorePartition, str],
        load: Mapping[str, int],
        heaviest: int,
    ) -> list[tuple[StorePartition, str, str]] | None:
        sources = [i for i in self._ids if load[i] == heaviest]
        reached: dict[str, tuple[StorePartition, str] | None] = dict.fromkeys(sources)
        frontier = sources
        while frontier:
            following = []
            for source in frontier:
                for partition in self._partitions:
                    if source not in standbys[partition]:
                        continue
                    for sink in self._ids:
                        if (
                            sink in reached
                            or sink == actives[partition]
                            or sink in standbys[partition]
                            or self._rank(sink, partition) > self._rank(source, partition)
                        ):
                            continue
                        reached[sink] = (partition, source)
                        if load[sink] <= heaviest - 2:
                            return self._moves(reached, sink)
                        following.append(sink)
            frontier = following
        return None

    @staticmethod
    def _moves(
        reached: Mapping[str, tuple[StorePartition, str] | None], sink: str
    ) -> list[tuple[StorePartition, str, str]]:
        moves = []
        step = reached[sink]
        while step is not None:
            partition, source = step
            moves.append((partition, source, sink))
            sink = source
            step = reached[sink]
        return moves[::-1]
