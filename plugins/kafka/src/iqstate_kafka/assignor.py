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
   by at most one). Where counts still differ by two or more (a member that joined hosts no
   replica of the others' standbys), the lightest members get warm-up replicas of the
   heaviest ones' standbys; once those catch up, the standbys move to them. An active's
   warm-up replica (rule 4) is added on top when it is not one of the standbys.

Members sharing a host (a misconfiguration, or a restarted process whose previous incarnation
has not yet been dropped) cannot both serve one endpoint: the one with the smallest member id
counts, the others get nothing.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
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
    roles: list[dict[str, dict[int, PartitionRole]]] = [
        {store: dict.fromkeys(range(stores[store]), ACTIVE) for store in everywhere} for _ in live
    ]
    for (store, number), owner in zip(partitions, actives, strict=True):
        roles[owner].setdefault(store, {})[number] = ACTIVE
    for (store, number), hosts in zip(partitions, standbys, strict=True):
        for i in hosts:
            roles[i].setdefault(store, {})[number] = STANDBY
    return {m.host: Assignment(mine) for m, mine in zip(live, roles, strict=True)}


def assign_declared(
    declared: Iterable[tuple[Member, Mapping[str, int]]],
    num_standby_replicas: int,
    acceptable_recovery_lag: int,
    everywhere: frozenset[str] = frozenset(),
) -> dict[HostInfo, Assignment]:
    """`assign` over members that may declare different stores: each member with the stores
    it declares (name -> partition count). A store's partitions go only to the members that
    declare it: stores declared by the same members are assigned together, each such group
    on its own. Every member computes the same layout from the same reports whatever it
    declares itself, so an instance declaring one store more (say, during a rolling upgrade
    that adds it) leaves the shared stores served; when all declare the same stores this is
    `assign`."""
    declared = list(declared)
    counted = {member.member_id for member in _one_per_host(m for m, _ in declared)}
    holders: dict[tuple[str, int], list[Member]] = {}
    for member, stores in declared:
        if member.member_id not in counted:
            continue  # a host counts once, as its first member, whatever the others declare
        for store, partitions in stores.items():
            holders.setdefault((store, partitions), []).append(member)
    # A store declared with other partition counts (its topics refuse all but one at
    # start): only the count most members declare (then the larger) is assigned.
    chosen: dict[str, tuple[int, int]] = {}
    for (store, partitions), members in holders.items():
        chosen[store] = max(chosen.get(store, (0, 0)), (len(members), partitions))
    holders = {key: members for key, members in holders.items() if chosen[key[0]][1] == key[1]}
    groups: dict[frozenset[str], dict[str, int]] = {}
    members_of: dict[frozenset[str], list[Member]] = {}
    for (store, partitions), members in sorted(holders.items()):
        ids = frozenset(member.member_id for member in members)
        groups.setdefault(ids, {})[store] = partitions
        members_of[ids] = members
    roles: dict[HostInfo, dict[str, Mapping[int, PartitionRole]]] = {
        member.host: {} for member, _ in declared if member.member_id in counted
    }
    for ids, stores in sorted(groups.items(), key=lambda group: sorted(group[1])):
        computed = assign(
            members_of[ids],
            stores,
            num_standby_replicas,
            acceptable_recovery_lag,
            everywhere & frozenset(stores),
        )
        for host, assignment in computed.items():
            roles.setdefault(host, {}).update(assignment.roles)
    return {host: Assignment(mine) for host, mine in roles.items()}


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
    """The steps of one assignment over fixed members and partitions (see the module doc).

    Members and partitions are numbered in member id and partition order, so comparing
    numbers orders them as the rules say. Each partition knows the members that host a
    replica of it and the caught-up ones among them, so every step looks at those few
    replicas and at the least loaded members (a heap), never at every member for every
    partition: one assignment costs about `P log n` for `P` partitions and `n` members, not
    `P * n` (evening standbys out adds a search over the standbys per move, when some must
    move). bench/membership_scale.py measures it (docs/membership-scale.md).
    """

    def __init__(
        self, members: list[Member], partitions: list[StorePartition], acceptable_lag: int
    ) -> None:
        self._count = len(members)
        self._partitions = partitions
        number = {partition: k for k, partition in enumerate(partitions)}
        self._lags: list[dict[int, int]] = [{} for _ in members]
        """Per member, its lag per partition it hosts a replica of."""
        self._warm: list[set[int]] = [set() for _ in members]
        """Per member, the partitions it hosts a caught-up replica of."""
        self._holders: list[list[int]] = [[] for _ in partitions]
        """Per partition, the members hosting a replica of it, in member order."""
        self._caught: list[list[int]] = [[] for _ in partitions]
        """Per partition, the members whose replica of it is caught up, in member order."""
        self._claimants: list[list[int]] = [[] for _ in partitions]
        for i, member in enumerate(members):
            for partition, lag in member.lags.items():
                if (k := number.get(partition)) is not None:
                    self._lags[i][k] = lag
                    self._holders[k].append(i)
                    if lag <= acceptable_lag:
                        self._warm[i].add(k)
                        self._caught[k].append(i)
            for partition in member.actives:
                if (k := number.get(partition)) is not None:
                    self._claimants[k].append(i)

    def _lag(self, i: int, k: int) -> float:
        """Member `i`'s lag on partition `k`; infinite without a replica."""
        lag = self._lags[i].get(k)
        return math.inf if lag is None else lag

    def _caught_up(self, i: int, k: int) -> bool:
        return k in self._warm[i]

    def _behind(self, i: int, k: int) -> float:
        """The lag beyond caught up: 0 for every caught-up replica, so that lags that move
        within `acceptable_recovery_lag` (as they do all the time) never move a partition."""
        return 0 if self._caught_up(i, k) else self._lag(i, k)

    def current_owners(self) -> list[int | None]:
        return [
            min(claimants, key=lambda i: (not self._caught_up(i, k), i)) if claimants else None
            for k, claimants in enumerate(self._claimants)
        ]

    def _quotas(self, current: list[int | None]) -> list[int]:
        base, extra = divmod(len(self._partitions), self._count)
        owned = [0] * self._count
        for owner in current:
            if owner is not None:
                owned[owner] += 1
        ranked = sorted(range(self._count), key=lambda i: (-owned[i], i))
        quota = [0] * self._count
        for rank, i in enumerate(ranked):
            quota[i] = base + (rank < extra)
        return quota

    def target(self, current: list[int | None]) -> list[int]:
        """A balanced owner per partition, as sticky as the quotas allow."""
        quota = self._quotas(current)
        target: list[int | None] = [None] * len(self._partitions)
        load = [0] * self._count
        claimed: list[list[int]] = [[] for _ in range(self._count)]
        for k, owner in enumerate(current):
            if owner is not None:
                claimed[owner].append(k)
        for i, mine in enumerate(claimed):
            mine.sort(key=lambda k: (not self._caught_up(i, k), k))
            for k in mine[: quota[i]]:
                target[k] = i
            load[i] = min(len(mine), quota[i])
        rest = sorted(
            (k for k, owner in enumerate(target) if owner is None),
            key=lambda k: (len(self._caught[k]), k),
        )
        lightest = _Lightest(load, quota)
        for k in rest:
            # under its quota: a caught-up member first, then one hosting a replica (of the
            # caught-up ones none is under its quota then), then the least loaded
            owner = _least_loaded(self._caught[k], load, quota)
            if owner is None:
                owner = _least_loaded(self._holders[k], load, quota)
            if owner is None:
                owner = lightest.first(frozenset())
            assert owner is not None  # the quotas add up to the partitions
            target[k] = owner
            load[owner] += 1
            lightest.loaded(owner)
        return [owner for owner in target if owner is not None]  # every partition has one

    def actives(
        self, current: list[int | None], target: list[int]
    ) -> tuple[list[int], dict[int, int]]:
        """Each partition's active, and the warm-up replica of each partition whose target is
        not (yet) the best replica to serve it."""
        actives: list[int | None] = [None] * len(self._partitions)
        overridden: list[tuple[int, list[int]]] = []
        for k, owner in enumerate(target):
            if self._caught_up(owner, k):
                actives[k] = owner
                continue
            # replicas with a lag (caught up or lagging less) are hosted ones
            better = self._caught[k] or [
                i for i in self._holders[k] if self._lag(i, k) < self._lag(owner, k)
            ]
            if better:
                overridden.append((k, better))
            else:
                actives[k] = owner
        load = [0] * self._count
        for active in actives:
            if active is not None:
                load[active] += 1
        warmups = {}
        for k, better in overridden:
            chosen = current[k]
            if chosen not in better:
                chosen = min(better, key=lambda i: (self._behind(i, k), load[i], i))
            assert chosen is not None
            actives[k] = chosen
            load[chosen] += 1
            warmups[k] = target[k]
        return [active for active in actives if active is not None], warmups  # all have one

    def _rank(self, i: int, k: int) -> tuple[bool, bool]:
        """How good a place for a replica of partition `k` member `i` is (smaller is better)."""
        return (k not in self._warm[i], k not in self._lags[i])

    def standbys(
        self, actives: list[int], warmups: Mapping[int, int], count: int
    ) -> list[list[int]]:
        """`count` standbys per partition, never on its active, plus its warm-up replica.

        Each pick is the best of the partition's replica holders (ranked one by one) and of
        the least loaded member hosting no replica of it (from the heap)."""
        share = math.ceil(count * len(self._partitions) / self._count)
        load = [0] * self._count
        lightest = _Lightest(load, [math.inf] * self._count)
        standbys: list[list[int]] = []
        for k, active in enumerate(actives):
            chosen: list[int] = []
            holders = self._holders[k]
            for _ in range(count):
                candidates = [
                    (load[i] >= share, self._rank(i, k), load[i], i)
                    for i in holders
                    if i != active and i not in chosen
                ]
                other = lightest.first(frozenset((*holders, active, *chosen)))
                if other is not None:
                    candidates.append((load[other] >= share, (True, True), load[other], other))
                pick = min(candidates)[3]
                chosen.append(pick)
                load[pick] += 1
                lightest.loaded(pick)
            standbys.append(chosen)
        self._even_out(standbys, actives, load)
        self._warm_up_to_even_out(standbys, actives, load, warmups)
        for k, warm in warmups.items():
            if warm not in standbys[k]:
                standbys[k].append(warm)
        return standbys

    def _even_out(self, standbys: list[list[int]], actives: list[int], load: list[int]) -> None:
        """Move standbys from the most loaded members towards the least loaded while counts
        differ by more than one, never to a worse place for the replica.

        A move may need a chain (the heaviest member's standbys are all on partitions the
        lightest one hosts already): the shortest chain of moves, each to a member that can
        take that partition, from a heaviest member to one at least two lighter, found
        breadth first in member id and partition order. Each chain lowers one count and raises
        another, so this ends.
        """
        placed: list[list[int]] = [[] for _ in range(self._count)]
        """Per member, the partitions it is a standby of, in partition order."""
        for k, chosen in enumerate(standbys):
            for i in chosen:
                placed[i].append(k)
        while True:
            heaviest = max(load)
            if min(load) > heaviest - 2:
                return
            chain = self._chain(standbys, actives, placed, load, heaviest)
            if chain is None:
                return
            for k, source, sink in chain:
                chosen = standbys[k]
                chosen[chosen.index(source)] = sink
                placed[source].remove(k)
                bisect.insort(placed[sink], k)
            load[chain[0][1]] -= 1
            load[chain[-1][2]] += 1

    def _warm_up_to_even_out(
        self,
        standbys: list[list[int]],
        actives: list[int],
        load: list[int],
        warmups: Mapping[int, int],
    ) -> None:
        """Where standby counts still differ by two or more, since evening out would cost
        warmth (the lightest members host no replica of the heaviest ones' standbys, as
        after an instance joined), give the lightest members warm-up replicas of the
        heaviest ones' standbys until the counts would differ by at most one. Once they have
        caught up, evening out moves those standbys to them (as an active's target warms
        up before it takes over; Kafka Streams' warm-up replicas). A partition warming up
        its next active gets no second warm-up."""
        planned = list(load)
        placed: list[list[int]] = [[] for _ in range(self._count)]
        for k, chosen in enumerate(standbys):
            for i in chosen:
                placed[i].append(k)
        by_load = [(n, i) for i, n in enumerate(planned)]
        heapq.heapify(by_load)
        while by_load:
            n, lightest = heapq.heappop(by_load)
            if n != planned[lightest]:
                continue  # a stale entry
            heavier = sorted(
                (i for i in range(self._count) if planned[i] >= n + 2),
                key=lambda i: (-planned[i], i),
            )
            if not heavier:
                return
            for source in heavier:  # the heaviest first that has a standby it can take
                movable = [
                    k
                    for k in placed[source]
                    if lightest != actives[k] and lightest not in standbys[k] and k not in warmups
                ]
                if movable:
                    k = movable[0]
                    standbys[k].append(lightest)
                    placed[source].remove(k)
                    planned[source] -= 1
                    planned[lightest] += 1
                    heapq.heappush(by_load, (planned[lightest], lightest))
                    break
            # else: nothing of theirs it can take: it stays light

    def _chain(
        self,
        standbys: list[list[int]],
        actives: list[int],
        placed: list[list[int]],
        load: list[int],
        heaviest: int,
    ) -> list[tuple[int, int, int]] | None:
        sources = [i for i in range(self._count) if load[i] == heaviest]
        reached: dict[int, tuple[int, int] | None] = dict.fromkeys(sources)
        unreached = [i for i in range(self._count) if i not in reached]
        frontier = sources
        while frontier:
            following = []
            for source in frontier:
                for k in placed[source]:
                    # the members that are as good a place for the replica as the source
                    rank = self._rank(source, k)
                    if rank == (False, False):
                        sinks = self._caught[k]
                    elif rank == (True, False):
                        sinks = self._holders[k]
                    else:
                        if len(unreached) + len(reached) > self._count:
                            unreached = [i for i in unreached if i not in reached]
                        sinks = unreached
                    for sink in sinks:
                        if sink in reached or sink == actives[k] or sink in standbys[k]:
                            continue
                        reached[sink] = (k, source)
                        if load[sink] <= heaviest - 2:
                            return self._moves(reached, sink)
                        following.append(sink)
                    if len(reached) == self._count:
                        return None
            frontier = following
        return None

    @staticmethod
    def _moves(
        reached: Mapping[int, tuple[int, int] | None], sink: int
    ) -> list[tuple[int, int, int]]:
        moves = []
        step = reached[sink]
        while step is not None:
            k, source = step
            moves.append((k, source, sink))
            sink = source
            step = reached[sink]
        return moves[::-1]


def _least_loaded(members: list[int], load: list[int], quota: list[int]) -> int | None:
    """The least loaded of `members` under its quota (then by member order), if any."""
    under = [(load[i], i) for i in members if load[i] < quota[i]]
    return min(under)[1] if under else None


class _Lightest:
    """The members in order of load, then member order, as loads grow one at a time: a heap
    whose entries that no longer hold (the member's load grew, or reached its limit) are
    dropped when they come up."""

    def __init__(self, load: list[int], limit: Sequence[float]) -> None:
        self._load = load
        self._limit = limit
        self._heap = [(n, i) for i, n in enumerate(load) if n < limit[i]]
        heapq.heapify(self._heap)

    def loaded(self, i: int) -> None:
        """Member `i`'s load grew by one."""
        if self._load[i] < self._limit[i]:
            heapq.heappush(self._heap, (self._load[i], i))

    def first(self, skipped: frozenset[int]) -> int | None:
        """The least loaded member under its limit that is not in `skipped`."""
        heap, put_back, found = self._heap, [], None
        while heap:
            n, i = heap[0]
            if n != self._load[i] or n >= self._limit[i]:
                heapq.heappop(heap)
            elif i in skipped:
                put_back.append(heapq.heappop(heap))
            else:
                found = i
                break
        for entry in put_back:
            heapq.heappush(heap, entry)
        return found
