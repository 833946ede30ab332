"""`KafkaAssignment`: the assignment provider of distributed mode (SPEC 9).

Membership travels through the members topic (`iqstate_kafka.membership`); every instance
runs the same pure assignor (`iqstate_kafka.assignor`) on the live members' heartbeats, so
all compute the same roles without a coordinator. Each heartbeat carries this instance's lag
per hosted replica (from the follower's `ReplicaProgress`), the partitions it serves as active
and which of those still restore.

**Restoring.** The assignor hands out `ACTIVE` and `STANDBY`; here an active is reported
`ACTIVE_RESTORING` from the moment it becomes active until the follower says it has caught up
to the end offset seen then (`ReplicaProgress.caught_up`, announced through `on_caught_up`),
then `ACTIVE` for as long as it stays active. Other instances' actives show as restoring in
`cluster()` until their heartbeats say they run.

**Lost contact.** When this instance's own heartbeats have not come back for longer than
`liveness_timeout`, the others have dropped it and moved its partitions, so it stops claiming
them: its actives become `ACTIVE_CUT_OFF` (queries that require an active get `NOT_ACTIVE`,
naming the silence) until its heartbeats come back; then they restore as after any change
of role, and run once the follower says they have caught up.

**Before the follower attaches** (`attach_progress`, before or after `start`), this instance
reports no lags, so every replica it may hold counts as not caught up: the assignor treats it
like a new instance. That errs on the safe side (an instance never wins an active by claiming
warmth it has not shown) and lasts until the follower reports its first lags.

**Settling.** An instance recomputes only from a view in which its own latest heartbeat
(read back from the topic) claims the actives it holds now (`_claims_echoed`): two
instances that changed at once would otherwise keep answering each other's previous claims.

**Threads.** Membership's thread heartbeats and reads the topic; changes (and caught-up
replicas) wake this provider's own thread, which recomputes the assignment, keeps `cluster()`
fresh, and tells the listeners when this instance's assignment changed. Listeners run on that
thread without any lock of this provider held: they install partitions, which may take a
while, and never delay a heartbeat. `close()` does not wait for a listener that is running
(it may be waiting for the application that is closing); that call finds the application
closed and returns, and the thread ends.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping

from iqstate.runtime.assignment import (
    ACTIVE,
    ACTIVE_CUT_OFF,
    ACTIVE_RESTORING,
    STANDBY,
    Assignment,
    AssignmentListener,
    AssignmentProvider,
    Contact,
    PartitionRole,
)
from iqstate.runtime.batch import StorePartition
from iqstate.runtime.metadata import Departure, HostInfo
from iqstate_kafka.assignor import Member, assign_declared
from iqstate_kafka.declarations import check_like_the_writers, declare_as_writer
from iqstate_kafka.heartbeats import Heartbeat, is_global
from iqstate_kafka.membership import LEAVING_GRACE, Membership
from iqstate_kafka.progress import ReplicaProgress
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import ensure_changelog_topics

logger = logging.getLogger("iqstate_kafka.assignment")


class KafkaAssignment(AssignmentProvider):
    """Roles for this instance and discovery for the whole cluster, through Kafka.

    `heartbeat_interval`: seconds between heartbeats. `liveness_timeout`: seconds without a
    heartbeat after which an instance counts as dead and its partitions move (at least three
    intervals). `acceptable_recovery_lag`: offsets a replica may lag and still count as
    caught up, i.e. be made active without restoring first (Kafka Streams' default, 10,000).
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        application_id: str,
        num_standby_replicas: int,
        *,
        heartbeat_interval: float = 0.5,
        liveness_timeout: float = 3.0,
        acceptable_recovery_lag: int = 10_000,
        shapes: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(num_standby_replicas, bool) or num_standby_replicas < 0:
            raise ValueError(f"num_standby_replicas must be >= 0, got {num_standby_replicas!r}")
        if isinstance(acceptable_recovery_lag, bool) or acceptable_recovery_lag < 0:
            raise ValueError(
                f"acceptable_recovery_lag must be >= 0 offsets, got {acceptable_recovery_lag!r}"
            )
        self._kafka = cluster
        self._application_id = application_id
        self._standbys = num_standby_replicas
        self._interval = heartbeat_interval
        self._timeout = liveness_timeout
        self._acceptable = acceptable_recovery_lag
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._dirty = False
        self._closed = False
        self._calling = False
        self._listening = False
        self._host: HostInfo | None = None
        self._stores: dict[str, int] = {}
        self._everywhere: frozenset[str] = frozenset()
        self._member_id = ""
        self._membership: Membership | None = None
        self._progress: ReplicaProgress | None = None
        self._mine = Assignment.empty()
        self._announced = Assignment.empty()
        self._cluster: dict[HostInfo, Assignment] = {}
        self._warned: set[str] = set()
        self._store_shapes = shapes
        self._shapes: dict[str, str] = {}
        """Each store's `heartbeats.store_shape`, compared with the other members'; taken
        from `shapes()` at `start`, when the application has declared its stores."""
        self._thread: threading.Thread | None = None

    @property
    def member_id(self) -> str:
        """This process's id in the members topic (empty before `start`)."""
        return self._member_id

    def host_everywhere(self, stores: frozenset[str]) -> None:
        self._everywhere = stores

    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        """Check or create the changelog and members topics, join, compute the first
        assignment. `BrokerUnavailableError` if Kafka does not answer within the cluster's
        `timeout`; `ChangelogTopicError` / `MembersTopicError` for topics that do not fit."""
        if self._membership is not None:
            raise RuntimeError("KafkaAssignment.start() was called already")
        ensure_changelog_topics(self._kafka, self._application_id, stores)
        if self._store_shapes is not None:
            self._shapes = dict(self._store_shapes())
            check_like_the_writers(self._kafka, self._application_id, self._shapes)
        self._host = this_host
        self._stores = dict(stores)
        self._member_id = f"{this_host}/{uuid.uuid4().hex}"
        membership = Membership(
            self._kafka,
            self._application_id,
            self._member_id,
            self._report,
            lambda _: self._stale(),
            heartbeat_interval=self._interval,
            liveness_timeout=self._timeout,
        )
        membership.start()
        self._membership = membership
        with self._lock:
            progress = self._progress
        mine, cluster = self._compute(membership.live(), Assignment.empty(), progress)
        with self._lock:
            self._mine = self._announced = mine
            self._cluster = cluster
        membership.beat_now()
        self._thread = threading.Thread(
            target=self._run, name=f"iqstate-assignment-{this_host}", daemon=True
        )
        self._thread.start()

    def attach_progress(self, progress: ReplicaProgress) -> None:
        """The follower's view of the replicas hosted here: from now on heartbeats carry
        their lags, `end_offset` answers, and actives run once they have caught up."""
        progress.on_caught_up(lambda _: self._stale())
        progress.on_rebuilt(lambda _: self._stale())
        with self._lock:
            self._progress = progress
            self._dirty = True
            self._wake.notify()
        if self._membership is not None:
            self._membership.beat_now()

    def assignment(self) -> Assignment:
        with self._lock:
            return self._mine

    def cluster(self) -> Mapping[HostInfo, Assignment]:
        with self._lock:
            return dict(self._cluster)

    def end_offset(self, store: str, partition: int) -> int | None:
        with self._lock:
            progress = self._progress
        return None if progress is None else progress.end_offset(store, partition)

    def reported_lags(self) -> Mapping[HostInfo, Mapping[StorePartition, int]]:
        """Every live instance's lag per hosted replica, from its latest heartbeat."""
        if self._membership is None:
            return {}
        return {
            heartbeat.member.host: heartbeat.member.lags
            for heartbeat in self._membership.live().values()
        }

    def departures(self) -> Mapping[HostInfo, Departure]:
        """Instances that left or went silent recently (see `Membership.departures`)."""
        return {} if self._membership is None else self._membership.departures()

    def contact(self) -> Contact:
        """Seconds since this instance's own heartbeat last came back, against the
        liveness timeout."""
        silence = 0.0 if self._membership is None else self._membership.silence()
        return Contact(silence, self._timeout)

    def add_listener(self, listener: AssignmentListener) -> None:
        """Also announces a change that came while nobody listened yet."""
        super().add_listener(listener)
        with self._lock:
            self._listening = True
        self._stale()

    def leave(self) -> float:
        """Leave the cluster now (a tombstone), keeping the assignment held: the others drop
        this member `LEAVING_GRACE` heartbeat intervals after reading the tombstone and
        promote its standbys. The seconds until then, with one interval to spare; 0 when
        no other member is live (nobody takes over, so there is nothing to wait for)."""
        membership = self._membership
        alone = membership is None or set(membership.live()) <= {membership.member_id}
        self.close()
        return 0.0 if alone else (LEAVING_GRACE + 1) * self._interval

    def close(self) -> None:
        """Leave the cluster (a tombstone: the others take over at once) and stop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify()
            calling = self._calling
        if self._membership is not None:
            self._membership.close()
        if self._thread is not None and not calling:
            self._thread.join()
        super().close()

    # -- the provider's thread -----------------------------------------------------------------

    def _stale(self) -> None:
        """Something the assignment depends on changed: wake the provider's thread."""
        with self._lock:
            self._dirty = True
            self._wake.notify()

    def _run(self) -> None:
        assert self._membership is not None
        cut_off = False
        while True:
            with self._lock:
                while not self._dirty and not self._closed:
                    # Woken by changes; and every heartbeat interval, to notice lost contact.
                    self._wake.wait(self._interval)
                    if self.contact().lost != cut_off:
                        break
                if self._closed:
                    return
                self._dirty = False
                previous, progress = self._mine, self._progress
            contact = self.contact()
            was_cut_off, cut_off = cut_off, contact.lost
            if cut_off and not was_cut_off:
                logger.warning(
                    "this instance has not heard from Kafka for %.1f s (liveness timeout %g s): "
                    "its active partitions are cut off until it does",
                    contact.silence_s,
                    self._timeout,
                )
            elif was_cut_off and not cut_off:
                logger.warning(
                    "this instance hears from Kafka again: its actives are no longer cut off"
                )
            live = self._membership.live()
            if cut_off == was_cut_off and not self._claims_echoed(live, previous):
                continue  # recomputed when this instance's heartbeat comes back
            try:
                mine, cluster = self._compute(live, previous, progress, cut_off=cut_off)
            except Exception:
                logger.exception("computing the assignment failed; keeping the last one")
                continue
            with self._lock:
                if self._closed:
                    return
                self._mine, self._cluster = mine, cluster
                announce = mine != self._announced and self._listening
                if announce:
                    self._announced = mine
                    self._calling = True
            if not announce:
                continue
            logger.info("this instance's assignment changed: %s", _described(mine))
            self._membership.beat_now()
            try:
                self._announce(mine)
            except Exception:
                logger.exception("an assignment listener failed")
            finally:
                with self._lock:
                    self._calling = False

    def _claims_echoed(self, live: Mapping[str, Heartbeat], previous: Assignment) -> bool:
        """Whether this instance's latest heartbeat read back from the members topic claims
        the actives it holds now (or it has none in the view: nothing to wait for).

        Computing from an older echo of its own claims makes two instances that changed at
        the same moment chase each other for ever: each sees its old claims next to the
        other's new ones, and answers with the other half of a balanced assignment
        (measured: two restoring actives swapping owners every heartbeat). Waiting until its
        own claims come back means the instance whose change landed last in the topic
        always computes from everyone's current claims, and the others follow it."""
        own = live.get(self._member_id)
        if own is None:
            return True
        holds = frozenset((s, p) for s, p, role in previous.items() if role.is_active)
        return own.member.actives == holds

    def _compute(
        self,
        live: Mapping[str, Heartbeat],
        previous: Assignment,
        progress: ReplicaProgress | None,
        *,
        cut_off: bool = False,
    ) -> tuple[Assignment, dict[HostInfo, Assignment]]:
        """This instance's assignment (with restoring or cut-off actives) and the whole
        cluster's."""
        assert self._host is not None
        self._check_stores(live)
        # Global stores, also those only others declare (a rolling upgrade adding one):
        # every member lays them out alike.
        everywhere = self._everywhere | {
            name
            for heartbeat in live.values()
            for name, shape in heartbeat.shapes.items()
            if is_global(shape)
        }
        computed = assign_declared(
            ((heartbeat.member, heartbeat.stores) for heartbeat in live.values()),
            self._standbys,
            self._acceptable,
            frozenset(everywhere),
        )
        mine = with_restoring(self._declared(computed.get(self._host)), previous, progress)
        if cut_off:
            mine = Assignment(
                {
                    store: {n: ACTIVE_CUT_OFF if r.is_active else r for n, r in roles.items()}
                    for store, roles in mine.roles.items()
                }
            )
            if progress is not None:  # given back, each restores first (`with_restoring`)
                for store, partition, role in mine.items():
                    if role.is_active:
                        progress.cut_off(store, partition)
        running = {
            heartbeat.member.host: heartbeat.member.actives - heartbeat.restoring
            for heartbeat in live.values()
        }
        cluster = {
            host: mine if host == self._host else _as_reported(assignment, running.get(host))
            for host, assignment in computed.items()
        }
        return mine, cluster

    def _declared(self, computed: Assignment | None) -> Assignment:
        """This instance's part of the layout, of the store partitions it declares only (a
        layout computed from other members' reports never asks it to host another)."""
        if computed is None:
            return Assignment.empty()
        return Assignment(
            {
                store: {n: role for n, role in roles.items() if n < self._stores[store]}
                for store, roles in computed.roles.items()
                if store in self._stores
            }
        )

    def _check_stores(self, live: Mapping[str, Heartbeat]) -> None:
        """Warn, once per member, of what it declares otherwise than this instance: other
        stores, other partition counts, or a shared store of another type, serde or
        partitioner."""
        for member_id, heartbeat in live.items():
            if member_id in self._warned:
                continue
            theirs, host = heartbeat.stores, heartbeat.member.host
            shared = sorted(set(theirs) & set(self._stores))
            recounted = [name for name in shared if theirs[name] != self._stores[name]]
            if set(theirs) != set(self._stores):
                logger.warning(
                    "member %s (%s) declares stores %s, this instance %s: a store's "
                    "partitions are shared among the instances that declare it (an instance "
                    "that lacks one hosts none of it); declare the same stores everywhere "
                    "once a rolling change is done",
                    member_id, host, sorted(theirs), sorted(self._stores),
                )  # fmt: skip
            if recounted:
                _warn_unlike(
                    member_id, host,
                    [f"store {n!r} with {theirs[n]} partitions" for n in recounted],
                    [f"with {self._stores[n]}" for n in recounted],
                    "a store has the partition count of its changelog topic, so one of the two "
                    "cannot have started; only one count is assigned",
                )  # fmt: skip
            differ = [
                name
                for name in shared
                if name in heartbeat.shapes
                and name in self._shapes
                and heartbeat.shapes[name] != self._shapes[name]
            ]
            if differ:
                _warn_unlike(
                    member_id, host,
                    [f"store {n!r} as {heartbeat.shapes[n]}" for n in differ],
                    [f"as {self._shapes[n]}" for n in differ],
                    "instances of one application must declare each store alike, or they "
                    "answer the same key differently (a value another serde wrote) and place "
                    "keys apart",
                )  # fmt: skip
            if set(theirs) != set(self._stores) or recounted or differ:
                self._warned.add(member_id)

    def _report(self) -> Heartbeat:
        """This instance's heartbeat: lags, actives and restoring actives (membership thread)."""
        assert self._host is not None
        with self._lock:
            mine, progress = self._mine, self._progress
        lags = {} if progress is None else dict(progress.lags())
        actives = frozenset((s, p) for s, p, role in mine.items() if role.is_active)
        restoring = frozenset(
            (s, p) for s, p, role in mine.items() if role.is_active and not role.is_running_active
        )
        return Heartbeat(
            Member(self._member_id, self._host, lags, actives),
            restoring,
            self._stores,
            self._shapes,
        )


def _warn_unlike(
    member_id: str, host: HostInfo, theirs: list[str], ours: list[str], why: str
) -> None:
    """Warn that member `member_id` declares stores otherwise than this instance."""
    logger.warning(
        "member %s (%s) declares %s, this instance %s: %s",
        member_id, host, "; ".join(theirs), "; ".join(ours), why,
    )  # fmt: skip


def _described(assignment: Assignment) -> str:
    """`store[partition]` of each role, grouped by its state (`RUNNING`, `STANDBY`, ...)."""
    by_state: dict[str, list[str]] = {}
    for store, partition, role in assignment.items():
        by_state.setdefault(role.state, []).append(f"{store}[{partition}]")
    described = (f"{state} {', '.join(names)}" for state, names in sorted(by_state.items()))
    return "; ".join(described) or "(none)"


def _as_reported(assignment: Assignment, running: frozenset[StorePartition] | None) -> Assignment:
    """Another instance's assignment: an active restores until its heartbeats say it runs."""
    return Assignment(
        {
            store: {
                partition: (
                    ACTIVE_RESTORING
                    if role.is_active and (store, partition) not in (running or frozenset())
                    else role
                )
                for partition, role in roles.items()
            }
            for store, roles in assignment.roles.items()
        }
    )


class WriterAssignment(AssignmentProvider):
    """The assignment of an application that only writes (`serving=False`): at start it
    checks the changelog topics its batches go to, and its stores against how the serving
    instances declare them (`shapes()`, read then), then declares them on the members topic
    for instances that start later (`declarations`); it hosts nothing, joins nothing, and
    so is never in the cluster's metadata nor routed to."""

    def __init__(
        self,
        kafka: ClusterSettings,
        application_id: str,
        shapes: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self._kafka = kafka
        self._application_id = application_id
        self._shapes = shapes

    def start(self, this_host: HostInfo, stores: Mapping[str, int]) -> None:
        ensure_changelog_topics(self._kafka, self._application_id, stores)
        if self._shapes is not None:
            declare_as_writer(self._kafka, self._application_id, self._shapes())

    def assignment(self) -> Assignment:
        return Assignment.empty()

    def cluster(self) -> Mapping[HostInfo, Assignment]:
        return {}


def with_restoring(
    computed: Assignment, previous: Assignment, progress: ReplicaProgress | None
) -> Assignment:
    """`computed` with each active restoring from becoming active until the follower says
    it caught up, and again once it is rebuilt (the follower then says it is not). An
    active that was cut off becomes active again restoring: the others may have moved its
    partitions, and their writers written on, while it was out of contact."""
    roles: dict[str, dict[int, PartitionRole]] = {}
    for store, partition, role in computed.items():
        if not role.is_active:
            roles.setdefault(store, {})[partition] = STANDBY
            continue
        before = previous.role(store, partition)
        running = (
            before is not None
            and before.is_active
            and not before.cut_off
            and (
                before.is_running_active
                if progress is None
                else progress.caught_up(store, partition)
            )
        )
        roles.setdefault(store, {})[partition] = ACTIVE if running else ACTIVE_RESTORING
    return Assignment(roles)
