"""Membership through Kafka: who is live, and what each live member reports (SPEC 9).

Every member of an application heartbeats on the compacted topic `<application_id>-members`
(one partition, created when missing and checked by `iqstate_kafka.topics`) and reads all of
it, so every member sees every other member's reports in the same order.

**Records.** Key = the member id, value = its heartbeat (`iqstate_kafka.heartbeats`): a
document of another version or shape is logged and skipped. A clean close writes a tombstone
(null value), so the others see the departure within `LEAVING_GRACE` heartbeat intervals (a
member that heartbeats after its tombstone did not write it, and stays: no churn from a
forged one); compaction then forgets the member.

**Suspect records.** Whoever can write the topic can write heartbeats. A heartbeat of a new
member id that claims the endpoint of a live member is logged as suspect and ignored while
that member lives (a restarted process is not one: it tombstones its earlier incarnation
when it joins), so a forged heartbeat cannot take an instance's place or make it churn. A
forged member with an endpoint of its own is not detectable this way: restrict who may
write the topic (docs/cluster.md, Security).

**Liveness.** A member is live while its last heartbeat was *received* within
`liveness_timeout`, measured on this process's monotonic clock, never the sender's. That clock
only counts *observed* time: time during which this member's own heartbeats come back from
the topic (allowing two heartbeat intervals for one to come back). When they stop coming back,
this member cannot tell a dead member from an unreachable broker, so it keeps its last view
instead of declaring everyone dead; once its own heartbeats come back, every member that was
live before gets a fresh `liveness_timeout` to be heard from again. So a broker restart
changes nobody's view, and a member that died meanwhile is dropped `liveness_timeout` after
the topic flows again. A member whose own heartbeats do not get through while others' do is
the odd one out: it keeps its view, the others drop it. Its heartbeats failing to be
delivered meanwhile, it replaces its producer once a liveness timeout; delivered but not
read back, its consumer (a librdkafka client can stay stuck after a broker restart:
`Membership._renew_stuck_producer`, `Membership._renew_stuck_consumer`).

**Joining.** A new member reads the topic from the beginning, writes its first heartbeat and
waits (at most the cluster's `timeout`) until it reads it back. The topic stamps records with
the broker's clock (`message.timestamp.type=LogAppendTime`), so the age of every earlier
heartbeat is known on one clock, the broker's, relative to the new member's own: those older
than `liveness_timeout` count as dead, the others as received that long ago. Entries of
another incarnation with this member's host (a process that died and was restarted) are
tombstoned, since that host is this process now.

**Compaction.** The topic is created with `segment.ms` of ten minutes, so heartbeats older
than that are compacted away and joining reads little; a dead member's last heartbeat stays
(one record per crashed incarnation) until its host joins again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

from iqstate.runtime.metadata import Departure, HostInfo
from iqstate_kafka.errors import MembersTopicError
from iqstate_kafka.heartbeats import WRITER_KEY_PREFIX, Heartbeat, decode, encode
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import (
    MEMBERS_CLIENT_DEFAULTS,
    ensure_members_topic,
    members_topic,
    unavailable,
)

logger = logging.getLogger("iqstate_kafka.membership")

DEPARTURES_KEPT = 600.0
"""Seconds a departed member's host is remembered (`Membership.departures`) unless it returns."""
LEAVING_GRACE = 3
"""Heartbeat intervals a member whose tombstone came has to heartbeat again (then the
tombstone was not its own) before it counts as gone; also how recently a member must have
been heard from for a newcomer claiming its endpoint to be reported as an impostor."""
BLIND_WARNING_EVERY = 30.0
"""Seconds between warnings while this member's own heartbeats do not come back (the first
comes two heartbeat intervals after the last echo): a long outage stays visible in the log."""
_POLL = 0.05


class ObservedClock:
    """Seconds during which this member saw the members topic flow: the clock liveness is
    measured on. It runs while this member's own heartbeats come back, and for `blind_after`
    seconds after the last one did; then it stops until the next one comes back."""

    def __init__(self, blind_after: float, now: float) -> None:
        self._blind_after = blind_after
        self._echo = now
        self._observed = 0.0

    def read(self, now: float) -> float:
        return self._observed + min(now - self._echo, self._blind_after)

    def blind(self, now: float) -> bool:
        return now - self._echo > self._blind_after

    def since_echo(self, now: float) -> float:
        """Seconds since this member's own heartbeat last came back."""
        return now - self._echo

    def echo(self, now: float) -> bool:
        """Record an own heartbeat read back at `now`; True if the clock had stopped."""
        stopped = self.blind(now)
        self._observed = self.read(now)
        self._echo = now
        return stopped


@dataclass
class _Entry:
    heartbeat: Heartbeat
    received: float
    """When it was received, on the observed clock."""


Report = Callable[[], Heartbeat]
ChangeListener = Callable[[Mapping[str, Heartbeat]], None]


class Membership:
    """This member's heartbeats and its view of the live members, kept by a background thread.

    `report()` is called on that thread for every heartbeat (it must be quick and must not
    call back into this object); `on_change(live)` is called on it whenever the live members or
    what they report change, with every live member's latest heartbeat by member id.
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        application_id: str,
        member_id: str,
        report: Report,
        on_change: ChangeListener,
        *,
        heartbeat_interval: float,
        liveness_timeout: float,
    ) -> None:
        if not heartbeat_interval > 0:
            raise ValueError(f"heartbeat_interval must be > 0 seconds, got {heartbeat_interval!r}")
        if not liveness_timeout >= 3 * heartbeat_interval:
            raise ValueError(
                f"liveness_timeout ({liveness_timeout!r} s) must be at least three heartbeat "
                f"intervals ({heartbeat_interval!r} s): one late heartbeat must not make a "
                "member look dead"
            )
        self._cluster = cluster
        self._application_id = application_id
        self._member_id = member_id
        self._report = report
        self._on_change = on_change
        self._interval = heartbeat_interval
        self._timeout = liveness_timeout
        self._topic = members_topic(application_id)
        self._lock = threading.Lock()
        self._live: dict[str, Heartbeat] = {}
        self._departed: dict[HostInfo, tuple[str, float]] = {}
        """Host -> (reason, monotonic time last heard from), under the lock."""
        # Only the thread that joins, then the background thread, touch what follows.
        self._entries: dict[str, _Entry] = {}
        self._clock = ObservedClock(2 * heartbeat_interval, time.monotonic())
        self._host: HostInfo | None = None
        self._warned: set[str] = set()
        self._leaving: dict[str, float] = {}
        """Members whose tombstone came (monotonic time): they leave unless they heartbeat
        within `LEAVING_GRACE` intervals (a tombstone someone else wrote)."""
        self._blind_warned: float | None = None
        """When the warning that this member's heartbeats do not come back was last logged."""
        self._producer: Producer | None = None
        self._producer_since = 0.0
        """When the producer was made (monotonic): a stuck one is replaced at most this often."""
        self._undelivered: str | None = None
        """Why the last heartbeat the producer failed to deliver failed (None: none since it
        was made)."""
        self._renewals = 0
        """Producers and consumers replaced since this member's heartbeats last came back."""
        self._consumer: Consumer | None = None
        self._consumer_since = 0.0
        """When the consumer was made (monotonic): a stuck one is replaced at most this often."""
        self._next_offset = OFFSET_BEGINNING
        """The offset of the next record of the topic to read (where a new consumer starts)."""
        self._unread_since: float | None = None
        """When a record of this member was first delivered since its heartbeats last came
        back (monotonic; None: none was)."""
        self._stop = threading.Event()
        self._beat = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def topic(self) -> str:
        return self._topic

    def start(self) -> None:
        """Create or check the topic, join (read the topic up to this member's first
        heartbeat) and start heartbeating. `BrokerUnavailableError` if the cluster does not
        answer within its `timeout`; `MembersTopicError` for a topic that does not fit."""
        ensure_members_topic(self._cluster, self._application_id)
        consumer = self._consumer = self._new_consumer()
        producer = self._producer = self._new_producer()
        self._producer_since = self._consumer_since = time.monotonic()
        try:
            self._join()
        except BaseException:
            producer.purge()
            producer.flush(0)
            consumer.close()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"iqstate-members-{self._member_id}", daemon=True
        )
        self._thread.start()

    def live(self) -> dict[str, Heartbeat]:
        """Every live member's latest heartbeat (this member's included), by member id."""
        with self._lock:
            return dict(self._live)

    def departures(self) -> dict[HostInfo, Departure]:
        """The hosts of members that left or went silent in the last `DEPARTURES_KEPT`
        seconds (those that died before this member joined included, from the topic's
        timestamps) and are not live again."""
        now = time.monotonic()
        with self._lock:
            live = {heartbeat.member.host for heartbeat in self._live.values()}
            return {
                host: Departure(reason, now - heard)
                for host, (reason, heard) in sorted(self._departed.items())
                if host not in live and now - heard <= DEPARTURES_KEPT
            }

    def silence(self) -> float:
        """Seconds since this member's own heartbeat last came back from the topic: how long
        it has not been in contact with the broker (a heartbeat interval or so while it is).
        Readable from any thread."""
        return self._clock.since_echo(time.monotonic())

    def beat_now(self) -> None:
        """Send a heartbeat now rather than at the next interval (the report changed)."""
        self._beat.set()

    def close(self) -> None:
        """Write this member's tombstone (the others drop it at once) and stop (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    # -- joining -----------------------------------------------------------------------------

    def _join(self) -> None:
        """Heartbeat, read the topic up to that heartbeat, and settle the earlier ones' ages."""
        first = self._report()
        self._host = first.member.host
        self._send(self._member_id, encode(first))
        deadline = time.monotonic() + self._cluster.timeout
        backlog: dict[str, tuple[Heartbeat | None, int]] = {}
        while (remaining := deadline - time.monotonic()) > 0:
            messages = self._consume(min(remaining, _POLL))
            for index, message in enumerate(messages):
                parsed = self._parse(message)
                if parsed is None:
                    continue
                member_id, heartbeat = parsed
                kind, stamp = message.timestamp()
                if member_id != self._member_id or heartbeat is None:
                    backlog[member_id] = (heartbeat, stamp)
                    continue
                if kind != TIMESTAMP_LOG_APPEND_TIME:
                    raise MembersTopicError(
                        f"records of members topic {self._topic!r} carry their producers' "
                        "clocks: it needs message.timestamp.type=LogAppendTime"
                    )
                self._settle(backlog, heartbeat, stamp)
                self._receive(messages[index + 1 :])
                self._publish()
                return
        raise unavailable(
            self._cluster, f"this member's first heartbeat on {self._topic} did not come back"
        )

    def _settle(
        self, backlog: Mapping[str, tuple[Heartbeat | None, int]], own: Heartbeat, stamp: int
    ) -> None:
        """Count the heartbeats read before this member's first one as received as long ago
        as the broker stamped them before it (dead if longer than the liveness timeout)."""
        now = time.monotonic()
        self._clock.echo(now)
        self._unread_since = None
        observed = self._clock.read(now)
        self._entries = {self._member_id: _Entry(own, observed)}
        for member_id, (heartbeat, sent) in sorted(backlog.items()):
            if heartbeat is None:
                continue
            if heartbeat.member.host == own.member.host:
                logger.info(
                    "members topic: member %s was an earlier process of this host (%s); "
                    "removing it",
                    member_id,
                    own.member.host,
                )
                self._send(member_id, None)
                continue
            age = (stamp - sent) / 1000
            if age <= self._timeout:
                self._entries[member_id] = _Entry(heartbeat, observed - age)
            else:
                self._departs(heartbeat.member.host, "silent", now - age)

    # -- the background thread ---------------------------------------------------------------

    def _run(self) -> None:
        next_beat = time.monotonic() + self._interval
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if self._beat.is_set() or now >= next_beat:
                    self._beat.clear()
                    next_beat = now + self._interval
                    self._send(self._member_id, encode(self._report()))
                messages = self._consume(max(0.0, min(_POLL, next_beat - now)))
                self._receive(messages)
                expired = self._expire()
                self._renew_stuck_producer()
                self._renew_stuck_consumer()
                if (messages or expired) and self._publish():
                    self._on_change(self.live())
            except Exception:
                logger.exception("members topic: heartbeat loop failed; carrying on")
                self._stop.wait(_POLL)
        self._leave()

    def _receive(self, messages: list[Message]) -> None:
        now = time.monotonic()
        for message in messages:
            parsed = self._parse(message)
            if parsed is None:
                continue
            member_id, heartbeat = parsed
            if member_id == self._member_id:
                if heartbeat is None:
                    logger.warning(
                        "members topic: a tombstone removed this member (%s): do two "
                        "processes use application_server %s, or did someone else write "
                        "it? Heartbeating at once so the others keep it",
                        member_id,
                        self._host,
                    )
                    self._beat.set()
                    continue
                self._echoed(now)
            if heartbeat is None:
                if member_id in self._entries:
                    self._leaving.setdefault(member_id, now)
                continue
            if member_id != self._member_id:
                if self._impostor(member_id, heartbeat):
                    continue
                if self._leaving.pop(member_id, None) is not None:
                    logger.warning(
                        "members topic: member %s (%s) heartbeats after its tombstone: the "
                        "tombstone was not its own (suspect); it stays",
                        member_id,
                        heartbeat.member.host,
                    )
                self._met(member_id, heartbeat)
                with self._lock:
                    self._departed.pop(heartbeat.member.host, None)
            self._entries[member_id] = _Entry(heartbeat, self._clock.read(now))

    def _impostor(self, member_id: str, heartbeat: Heartbeat) -> bool:
        """A heartbeat of a new member id claiming the endpoint of a member that is live:
        suspect, and not believed over that member (it is logged once). A restarted
        process is not one: it tombstones its earlier incarnation when it joins."""
        host = heartbeat.member.host
        if member_id in self._entries:
            return False
        holders = [
            other
            for other, entry in self._entries.items()
            if entry.heartbeat.member.host == host and other not in self._leaving
        ]
        if not holders:
            return False
        heard = self._clock.read(time.monotonic()) - self._entries[holders[0]].received
        # A holder silent for a while is probably the dead process the claimant restarts;
        # its tombstone follows at once. One that heartbeats is being impersonated.
        if heard <= LEAVING_GRACE * self._interval and member_id not in self._warned:
            self._warned.add(member_id)
            logger.warning(
                "members topic: member %s claims endpoint %s of live member %s (suspect); "
                "ignored while that member is live",
                member_id,
                host,
                holders[0],
            )
        return True

    def _met(self, member_id: str, heartbeat: Heartbeat) -> None:
        """Log another member's arrival."""
        if member_id not in self._entries:
            logger.info("members topic: member %s (%s) joined", member_id, heartbeat.member.host)

    def _echoed(self, now: float) -> None:
        """This member's own heartbeat came back: the clock runs; after a stop, every member
        still counted live gets a fresh liveness timeout to be heard from."""
        if not self._clock.echo(now):
            return
        observed = self._clock.read(now)
        for entry in self._entries.values():
            entry.received = max(entry.received, observed)
        self._unread_since = None
        self._blind_warned = None
        self._renewals = 0
        logger.info(
            "members topic: this member's heartbeats come back again; %d members get %g s to be "
            "heard from",
            len(self._entries),
            self._timeout,
        )

    def _expire(self) -> bool:
        """Drop the members that left (a tombstone, then no heartbeat for `LEAVING_GRACE`
        intervals) or were not heard from for the liveness timeout; True if any was."""
        now = time.monotonic()
        expired = False
        for member_id, since in list(self._leaving.items()):
            if now - since < LEAVING_GRACE * self._interval:
                continue
            del self._leaving[member_id]
            if (gone := self._entries.pop(member_id, None)) is not None:
                logger.info("members topic: member %s left", member_id)
                self._departs(gone.heartbeat.member.host, "left", now)
                expired = True
        if self._clock.blind(now) and (
            self._blind_warned is None or now - self._blind_warned >= BLIND_WARNING_EVERY
        ):
            self._blind_warned = now
            logger.warning(
                "members topic: this member's heartbeats have not come back for %.0f s (is the "
                "broker reachable?); keeping the last view of %d members until they do",
                self._clock.since_echo(now),
                len(self._entries),
            )
        observed = self._clock.read(now)
        for member_id, entry in list(self._entries.items()):
            silent = observed - entry.received
            if member_id != self._member_id and silent > self._timeout:
                del self._entries[member_id]
                expired = True
                self._departs(entry.heartbeat.member.host, "silent", now - silent)
                logger.warning(
                    "members topic: member %s (%s) not heard from for %.1f s; dropped",
                    member_id,
                    entry.heartbeat.member.host,
                    silent,
                )
        return expired

    def _departs(self, host: HostInfo, reason: str, last_heard: float) -> None:
        with self._lock:
            self._departed[host] = (reason, last_heard)

    def _publish(self) -> bool:
        """Make the entries the live view; True if that changed it."""
        live = {member_id: entry.heartbeat for member_id, entry in self._entries.items()}
        with self._lock:
            changed = live != self._live
            self._live = live
        return changed

    def _leave(self) -> None:
        assert self._producer is not None and self._consumer is not None
        self._send(self._member_id, None)
        if self._producer.flush(self._cluster.timeout):
            logger.warning(
                "members topic: this member's departure was not delivered within %g s; the "
                "others drop it after the liveness timeout instead",
                self._cluster.timeout,
            )
        self._consumer.close()

    # -- clients -----------------------------------------------------------------------------

    def _new_consumer(self) -> Consumer:
        """A consumer of the members topic from `_next_offset` (the beginning at first)."""
        consumer = Consumer(
            self._cluster.client_settings(
                {**MEMBERS_CLIENT_DEFAULTS, "group.id": f"iqstate-members-{self._application_id}"},
                **{
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        consumer.assign([KafkaTopicPartition(self._topic, 0, self._next_offset)])
        return consumer

    def _new_producer(self) -> Producer:
        return Producer(
            self._cluster.client_settings(
                {**MEMBERS_CLIENT_DEFAULTS, "linger.ms": 0},
                **{
                    "max.in.flight.requests.per.connection": 1,
                    # One request in flight keeps records in order (a retried heartbeat never
                    # lands after this member's tombstone); a duplicate is harmless, so the
                    # idempotent producer (a producer id from the broker first) is not needed.
                    "enable.idempotence": False,
                    "acks": "all",
                    "message.timeout.ms": max(1, int(self._timeout * 1000)),
                    "on_delivery": self._delivered,
                    "error_cb": _client_error,
                },
            )
        )

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        """The producer's report of one record (on the thread that polls it): the reason
        the last record failed, or `None` once one is delivered again (a failure from a
        past outage must not make a later, healthy silence look like a stuck producer)."""
        if error is None:
            self._undelivered = None
            now = time.monotonic()
            if self._unread_since is None and self._clock.blind(now):
                self._unread_since = now
            return
        logger.debug("members topic: a record was not delivered: %s", error.str())
        self._undelivered = error.str()

    def _renew_stuck_producer(self) -> None:
        """Replace the producer when this member's heartbeats fail to be delivered while they
        do not come back, at most once a liveness timeout. A librdkafka producer can stay
        stuck for good after a broker restart: once a metadata answer gave the members
        partition no leader ("new leader-1 not found in cache"), it may never send to the
        partition again, though the broker is back and every other client works (measured:
        once in 26 broker restarts under load here; vectordotdev/vector#25375 reports the
        same). A new producer asks for fresh metadata. During a plain outage this costs one
        new producer per liveness timeout, each failing as the old one did until the broker
        is back."""
        now = time.monotonic()
        if (
            self._undelivered is None
            or not self._clock.blind(now)
            or now - self._producer_since < self._timeout
        ):
            return
        assert self._producer is not None
        (logger.warning if self._renewals == 0 else logger.info)(
            "members topic: this member's heartbeats are not delivered (%s); replacing its "
            "producer",
            self._undelivered,
        )
        self._producer.purge()
        self._producer.flush(0)
        self._producer = self._new_producer()
        self._producer_since = now
        self._undelivered = None
        self._renewals += 1
        self._beat.set()  # the purged heartbeat again, from the new producer, at once

    def _renew_stuck_consumer(self) -> None:
        """Replace the consumer when this member's records are delivered but its heartbeats
        do not come back for a liveness timeout, at most once a liveness timeout. A
        librdkafka consumer of an assigned partition can stop fetching for good after a
        broker restart while every other client carries on (seen once in a CI run: 300 s
        blind while the producer delivered; confluentinc/librdkafka#5153 reports the same,
        cured by a new consumer). The new one resumes after the last record read."""
        now = time.monotonic()
        if (
            self._unread_since is None
            or now - self._unread_since < self._timeout
            or now - self._consumer_since < self._timeout
        ):
            return
        assert self._consumer is not None
        (logger.warning if self._renewals == 0 else logger.info)(
            "members topic: this member's heartbeats are delivered but not read back for "
            "%.0f s; replacing its consumer (resuming at offset %d)",
            now - self._unread_since,
            self._next_offset,
        )
        # On a thread of its own: closing a consumer stuck in librdkafka may hang as well,
        # and this thread heartbeats.
        threading.Thread(
            target=self._consumer.close, name="iqstate-members-close", daemon=True
        ).start()
        self._consumer = self._new_consumer()
        self._consumer_since = now
        self._unread_since = None
        self._renewals += 1

    def _send(self, member_id: str, value: bytes | None) -> None:
        assert self._producer is not None
        try:
            self._producer.produce(self._topic, key=member_id.encode(), value=value, partition=0)
        except (BufferError, KafkaException) as exc:
            logger.warning("members topic: could not send for member %s: %s", member_id, exc)

    def _consume(self, timeout: float) -> list[Message]:
        assert self._producer is not None and self._consumer is not None
        self._producer.poll(0)
        messages: list[Message] = self._consumer.consume(1000, timeout)
        for message in reversed(messages):
            offset = message.offset()
            if message.error() is None and offset is not None:
                self._next_offset = offset + 1
                break
        return messages

    def _parse(self, message: Message) -> tuple[str, Heartbeat | None] | None:
        """`(member id, heartbeat or None for a tombstone)`, or None for a record to skip."""
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                logger.warning("members topic: %s", error.str())
            return None
        key, value = message.key(), message.value()
        if key is not None and key.startswith(WRITER_KEY_PREFIX):
            return None  # a writer's declaration: no member
        try:
            if key is None:
                raise ValueError("no key")
            member_id = key.decode()
            return member_id, None if value is None else decode(member_id, value)
        except ValueError as exc:  # UnicodeDecodeError included
            logger.error(
                "members topic %s offset %s: record does not decode (%s); skipped",
                self._topic,
                message.offset(),
                exc,
            )
            return None


def _client_error(error: KafkaError) -> None:
    """Client-wide errors (a broker down, for instance): librdkafka retries by itself, and
    what membership makes of an outage is logged by the heartbeat loop."""
    logger.debug("members topic: %s", error.str())
