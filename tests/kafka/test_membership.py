"""Membership on a real broker: the members topic, members seeing each other (at once when
joining), a clean close seen at once, a SIGKILLed member dropped after the liveness timeout,
a restarted host replacing its earlier process, a broker restart that changes nobody's view,
undecodable records skipped, and an unreachable broker reported quickly."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from iqstate_kafka import BrokerUnavailableError, KafkaCluster, LocalBroker
from iqstate_kafka import membership as membership_module
from iqstate_kafka.assignor import Member
from iqstate_kafka.errors import MembersTopicError
from iqstate_kafka.heartbeats import Heartbeat, decode, encode, is_global, store_shape
from iqstate_kafka.membership import Membership
from iqstate_kafka.topics import ensure_members_topic

from iqstate import Application
from iqstate.runtime.metadata import HostInfo

INTERVAL = 0.1
LIVENESS = 1.0
RESTART_LIVENESS = 3.0
PATIENCE = 30.0
"""Seconds a bounded wait gives something that needs no timeout to happen (a tombstone read,
a heartbeat arriving): far below the liveness timeouts such tests use, far above the
milliseconds it takes."""

CHILD = """
import sys, time
from iqstate_kafka import KafkaCluster
from iqstate_kafka.assignor import Member
from iqstate_kafka.heartbeats import Heartbeat
from iqstate_kafka.membership import Membership
from iqstate.runtime.metadata import HostInfo
servers, application, member_id, port, interval, liveness = sys.argv[1:]
heartbeat = Heartbeat(Member(member_id, HostInfo("127.0.0.1", int(port))))
membership = Membership(
    KafkaCluster(servers), application, member_id, lambda: heartbeat, lambda live: None,
    heartbeat_interval=float(interval), liveness_timeout=float(liveness),
)
membership.start()
print("joined", flush=True)
time.sleep(3600)
"""


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds:g} s: {what}")
        time.sleep(0.02)


class Reporter:
    """A member's report, changeable by the test, and the views it was told about."""

    def __init__(self, member_id: str, port: int) -> None:
        self.heartbeat = Heartbeat(Member(member_id, HostInfo("127.0.0.1", port)))
        self.views: list[Mapping[str, Heartbeat]] = []

    def report(self) -> Heartbeat:
        return self.heartbeat

    def changed(self, live: Mapping[str, Heartbeat]) -> None:
        self.views.append(live)


class Members:
    """Starts members of one application on one cluster; closes them at the end."""

    def __init__(self, cluster: KafkaCluster, application_id: str) -> None:
        self.cluster = cluster
        self.application_id = application_id
        self.started: list[Membership] = []
        self.children: list[subprocess.Popen[str]] = []

    def start(
        self, member_id: str, port: int, *, interval: float = INTERVAL, liveness: float = LIVENESS
    ) -> tuple[Membership, Reporter]:
        reporter = Reporter(member_id, port)
        membership = Membership(
            self.cluster,
            self.application_id,
            member_id,
            reporter.report,
            reporter.changed,
            heartbeat_interval=interval,
            liveness_timeout=liveness,
        )
        membership.start()
        self.started.append(membership)
        return membership, reporter

    def child(
        self, member_id: str, port: int, *, liveness: float = LIVENESS
    ) -> subprocess.Popen[str]:
        """A member in a process of its own, joined when this returns."""
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                self.cluster.bootstrap_servers,
                self.application_id,
                member_id,
                str(port),
                str(INTERVAL),
                str(liveness),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == "joined\n", f"child {member_id} did not join"
        return process

    def close(self) -> None:
        for process in self.children:
            process.kill()
            process.wait()
        for membership in self.started:
            membership.close()


@pytest.fixture
def members(cluster: KafkaCluster, unique_name: Callable[[str], str]) -> Iterator[Members]:
    started = Members(cluster, unique_name("app"))
    try:
        yield started
    finally:
        started.close()


def topic_settings(cluster: KafkaCluster, topic: str) -> tuple[int, dict[str, str]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return partitions, {name: entry.value for name, entry in entries.items()}


def test_the_members_topic_is_created_compacted_with_one_partition_and_broker_time(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    assert ensure_members_topic(cluster, app) == f"{app}-members"
    partitions, settings = topic_settings(cluster, f"{app}-members")
    assert partitions == 1
    assert settings["cleanup.policy"] == "compact"
    assert settings["message.timestamp.type"] == "LogAppendTime"
    assert settings["segment.ms"] == "600000"
    assert ensure_members_topic(cluster, app) == f"{app}-members"  # present and fit: accepted


COMPACT = {"cleanup.policy": "compact"}
BROKER_TIME = {"message.timestamp.type": "LogAppendTime"}


@pytest.mark.parametrize(
    ("partitions", "config", "problem"),
    [
        (2, {**COMPACT, **BROKER_TIME}, "has 2 partitions, expected 1"),
        (1, {"cleanup.policy": "delete", **BROKER_TIME}, "has cleanup.policy='delete', expected"),
        (1, COMPACT, "has message.timestamp.type='CreateTime', expected 'LogAppendTime'"),
    ],
)
def test_a_members_topic_that_does_not_fit_is_refused(
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    partitions: int,
    config: dict[str, str],
    problem: str,
) -> None:
    app = unique_name("app")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(f"{app}-members", partitions, 1, config=config)
    admin.create_topics([new])[f"{app}-members"].result(timeout=10)
    with pytest.raises(MembersTopicError, match=f"members topic '{app}-members' {problem}"):
        ensure_members_topic(cluster, app)


def test_heartbeats_round_trip_as_json() -> None:
    heartbeat = Heartbeat(
        Member(
            "m-1", HostInfo("10.0.0.7", 7070), {("s", 0): 12, ("t", 3): 0}, frozenset({("s", 0)})
        ),
        frozenset({("s", 0)}),
        {"s": 4, "t": 8},
        {"s": "key_value, key_serde string, value_serde json"},
    )
    encoded = encode(heartbeat)
    document = json.loads(encoded)
    assert document["v"] == 1
    assert document["lags"] == [["s", 0, 12], ["t", 3, 0]]
    assert decode("m-1", encoded) == heartbeat
    later = json.dumps({**document, "zone": "eu-1"}).encode()  # unknown fields are ignored
    assert decode("m-1", later) == heartbeat
    # A member from before shapes were sent: nothing to compare, still a member.
    earlier = {key: value for key, value in document.items() if key != "shapes"}
    assert decode("m-1", json.dumps(earlier).encode()).shapes == {}
    # A later version's other form of shapes: not compared, still a member.
    other = json.dumps({**document, "shapes": {"s": {"type": "key_value"}}}).encode()
    assert decode("m-1", other).member == heartbeat.member and decode("m-1", other).shapes == {}


def test_a_global_store_is_known_as_one_from_its_shape(tmp_path: Path) -> None:
    # A member that does not declare a global store (a rolling upgrade adding it) still
    # lays it out as one, from the declarers' heartbeats.
    app = Application("shapes", tmp_path)
    app.key_value_store("orders", 2)
    app.global_key_value_store("currencies")
    assert is_global(store_shape(app.stores["currencies"]))
    assert not is_global(store_shape(app.stores["orders"]))


VALID = {"v": 1, "host": "h", "port": 80, "stores": {}, "lags": [], "actives": [], "restoring": []}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"\x80\x04pickle", "not JSON"),
        (b"[1]", "not a JSON object"),
        (json.dumps({**VALID, "v": 2}).encode(), "version 2, this member reads 1"),
        (json.dumps({**VALID, "port": "80"}).encode(), "port an int"),
        (json.dumps({**VALID, "lags": [["s", 0]]}).encode(), "is not \\[store, partition, lag\\]"),
        (json.dumps({**VALID, "actives": [["s", True]]}).encode(), "is not \\[store, partition\\]"),
        (json.dumps({**VALID, "restoring": None}).encode(), "restoring must be a list"),
    ],
)
def test_documents_that_do_not_decode_say_why(value: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode("m-1", value)


def test_members_see_each_other_and_a_joining_member_sees_the_others_at_once(
    members: Members,
) -> None:
    first, first_reports = members.start("a", 7001)
    second, _ = members.start("b", 7002)
    # read from the topic's beginning while joining: no wait for the next heartbeat
    assert set(second.live()) == {"a", "b"}
    assert second.live()["a"].member.host == HostInfo("127.0.0.1", 7001)
    wait_until(lambda: set(first.live()) == {"a", "b"}, PATIENCE, "the first sees the second")
    assert any(set(view) == {"a", "b"} for view in first_reports.views)

    first_reports.heartbeat = Heartbeat(
        Member("a", HostInfo("127.0.0.1", 7001), {("s", 1): 5}, frozenset({("s", 1)}))
    )
    first.beat_now()
    wait_until(
        lambda: second.live()["a"].member.lags == {("s", 1): 5},
        PATIENCE,
        "a changed report reaches the other member",
    )


def test_a_clean_close_is_seen_at_once(members: Members) -> None:
    leaving, _ = members.start("a", 7001, liveness=60.0)
    staying, reports = members.start("b", 7002, liveness=60.0)
    wait_until(lambda: set(leaving.live()) == {"a", "b"}, PATIENCE, "both members live")
    leaving.close()
    # a liveness timeout of 60 s: only the tombstone can explain a departure seen this soon
    wait_until(lambda: set(staying.live()) == {"b"}, PATIENCE, "the departure is seen")
    assert set(reports.views[-1]) == {"b"}
    [(host, departure)] = staying.departures().items()
    assert host == HostInfo("127.0.0.1", 7001) and departure.reason == "left"
    leaving.close()  # idempotent


def test_a_killed_member_is_dropped_after_the_liveness_timeout(members: Members) -> None:
    observer, reports = members.start("a", 7001)
    child = members.child("b", 7002)
    wait_until(lambda: "b" in observer.live(), PATIENCE, "the child member is live")
    child.kill()
    child.wait()
    wait_until(
        lambda: "b" not in observer.live(),
        LIVENESS + 2 * INTERVAL + 2.0,  # the timeout, a heartbeat, and slack for a busy machine
        "the killed member is dropped within the liveness timeout and a heartbeat",
    )
    assert set(reports.views[-1]) == {"a"}
    departure = observer.departures()[HostInfo("127.0.0.1", 7002)]
    assert departure.reason == "silent" and departure.seconds_ago >= LIVENESS


def test_a_member_dead_longer_than_the_liveness_timeout_is_not_seen_when_joining(
    members: Members,
) -> None:
    child = members.child("gone", 7009)
    child.kill()
    child.wait()
    time.sleep(LIVENESS + 0.5)  # let its last heartbeat grow older than the liveness timeout
    joined, _ = members.start("a", 7001)
    assert set(joined.live()) == {"a"}
    # the broker's timestamps tell the newcomer that host went silent, and how long ago
    departure = joined.departures()[HostInfo("127.0.0.1", 7009)]
    assert departure.reason == "silent" and departure.seconds_ago > LIVENESS


def test_a_restarted_host_replaces_its_earlier_process_at_once(members: Members) -> None:
    observer, _ = members.start("a", 7001, liveness=60.0)
    crashed = members.child("b-1", 7002, liveness=60.0)
    wait_until(lambda: "b-1" in observer.live(), PATIENCE, "the first process of b is live")
    crashed.kill()
    crashed.wait()
    restarted, _ = members.start("b-2", 7002, liveness=60.0)
    assert set(restarted.live()) == {"a", "b-2"}
    # it tombstoned its predecessor: the observer drops b-1 long before 60 s
    wait_until(lambda: set(observer.live()) == {"a", "b-2"}, PATIENCE, "b-1 replaced by b-2")
    assert observer.departures() == {} and restarted.departures() == {}  # b's host is back


def test_undecodable_records_are_skipped_and_logged(
    members: Members, caplog: pytest.LogCaptureFixture
) -> None:
    observer, _ = members.start("a", 7001)
    producer = Producer({"bootstrap.servers": members.cluster.bootstrap_servers})
    producer.produce(f"{members.application_id}-members", key=b"junk", value=b"not json")
    producer.flush(10)
    wait_until(
        lambda: "record does not decode (not JSON" in caplog.text, PATIENCE, "the record is logged"
    )
    second, _ = members.start("b", 7002)  # joining skips it too
    wait_until(lambda: set(observer.live()) == {"a", "b"}, PATIENCE, "membership carries on")
    assert "junk" not in second.live()


def test_an_unreachable_broker_is_a_clear_error() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    nobody = KafkaCluster(f"127.0.0.1:{port}", timeout=1.0)
    heartbeat = Heartbeat(Member("a", HostInfo("127.0.0.1", 7001)))
    membership = Membership(
        nobody, "app", "a", lambda: heartbeat, lambda live: None,
        heartbeat_interval=INTERVAL, liveness_timeout=LIVENESS,
    )  # fmt: skip
    with pytest.raises(
        BrokerUnavailableError, match=f"Kafka at 127.0.0.1:{port} did not answer within 1 s"
    ):
        membership.start()
    membership.close()


def test_a_liveness_timeout_shorter_than_three_heartbeats_is_refused(cluster: KafkaCluster) -> None:
    with pytest.raises(ValueError, match="must be at least three heartbeat intervals"):
        Membership(
            cluster,
            "app",
            "a",
            lambda: Heartbeat(Member("a", HostInfo("h", 1))),
            lambda live: None,
            heartbeat_interval=1.0,
            liveness_timeout=2.0,
        )


def test_a_consumer_that_stops_reading_is_replaced_and_nobodys_view_changes(
    members: Members, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A librdkafka consumer of an assigned partition can stop fetching for good after a
    broker restart while the producer delivers (confluentinc/librdkafka#5153; seen once in
    CI, and not something a test can cause at will), so the member's own heartbeats stop
    coming back. Here the first member's consumer stops returning records (the real broker
    and clients otherwise): the member keeps its view, replaces the consumer after a
    liveness timeout, and the new one carries on after the last record read."""
    made: list[Consumer] = []
    stalled: set[int] = set()
    returned: dict[int, list[int]] = {}
    """Offsets of the records each consumer returned, by its id()."""

    class StallingConsumer(Consumer):
        def __init__(self, config: dict[str, object]) -> None:
            super().__init__(config)
            made.append(self)

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
            if id(self) in stalled:
                time.sleep(timeout)
                return []
            messages: list[Message] = super().consume(num_messages, timeout)
            offsets = returned.setdefault(id(self), [])
            offsets.extend(m.offset() or 0 for m in messages if m.error() is None)
            return messages

    monkeypatch.setattr(membership_module, "Consumer", StallingConsumer)
    stuck, reports = members.start("a", 7001)
    other, other_reports = members.start("b", 7002)
    wait_until(lambda: set(stuck.live()) == {"a", "b"}, PATIENCE, "both members live")
    assert "replacing its consumer" not in caplog.text  # a healthy one is kept
    stalled.add(id(made[0]))
    stalled_at = time.monotonic()
    with caplog.at_level(logging.INFO, logger="iqstate_kafka.membership"):
        wait_until(
            lambda: "replacing its consumer" in caplog.text,
            PATIENCE,
            "the stuck consumer is replaced",
        )
        replaced_after = time.monotonic() - stalled_at
        other_reports.heartbeat = Heartbeat(Member("b", HostInfo("127.0.0.1", 7002), {("s", 0): 7}))
        other.beat_now()
        wait_until(
            lambda: stuck.live()["b"].member.lags == {("s", 0): 7},
            PATIENCE,
            "the new consumer reads the other member's heartbeats again",
        )
    # blind after two heartbeat intervals, then a liveness timeout of delivered heartbeats
    # not read back: not sooner (a slow consumer is not replaced at once)
    assert replaced_after >= LIVENESS, replaced_after
    # The new consumer resumed right after the last record the stuck one returned.
    old_offsets, new_offsets = returned[id(made[0])], returned[id(made[-1])]
    assert made[-1] is not made[0] and new_offsets[0] == old_offsets[-1] + 1
    assert new_offsets == list(range(new_offsets[0], new_offsets[-1] + 1))
    assert all(set(view) == {"a", "b"} for view in reports.views[1:]), reports.views
    assert all(set(view) == {"a", "b"} for view in other_reports.views[1:]), other_reports.views
    assert "not heard from" not in caplog.text


def test_a_broker_restart_changes_nobodys_view_and_a_member_lost_meanwhile_is_dropped_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the broker is away (longer than the liveness timeout), each member keeps its
    view instead of declaring the others dead, and says so again and again in its log; its
    heartbeats failing, it replaces its producer; once the broker is back, the live ones carry
    on and one SIGKILLed during the outage is dropped after the liveness timeout.

    With the product's default liveness timeout (3 s): a member gets that long to be heard
    from once its own heartbeats come back, and a restarted broker's clients reconnect
    within `reconnect.backoff.max.ms` (1 s), so a 1 s timeout would race them."""
    with LocalBroker(tmp_path / "broker") as broker:
        started = Members(KafkaCluster(broker.bootstrap_servers, timeout=5.0), "restart")
        try:
            first, first_reports = started.start("a", 7001, liveness=RESTART_LIVENESS)
            second, _ = started.start("b", 7002, liveness=RESTART_LIVENESS)
            lost = started.child("c", 7003, liveness=RESTART_LIVENESS)
            for membership in (first, second):
                wait_until(
                    lambda m=membership: set(m.live()) == {"a", "b", "c"}, PATIENCE, "all live"
                )

            monkeypatch.setattr(membership_module, "BLIND_WARNING_EVERY", RESTART_LIVENESS / 2)
            broker.stop()
            stopped = time.monotonic()
            lost.kill()
            lost.wait()
            with caplog.at_level(logging.WARNING, logger="iqstate_kafka.membership"):
                while time.monotonic() - stopped < 2 * RESTART_LIVENESS:
                    assert set(first.live()) == {"a", "b", "c"}
                    assert set(second.live()) == {"a", "b", "c"}
                    time.sleep(0.05)
            silences = [
                int(found.group(1))
                for record in caplog.records
                if (
                    found := re.search(r"heartbeats have not come back for (\d+) s", record.message)
                )
            ]
            assert len(silences) >= 4 and max(silences) >= RESTART_LIVENESS, silences
            # Their heartbeats time out meanwhile: each replaces its producer (one can stay
            # stuck after a restart) and the new one delivers once the broker is back.
            renewed = [r for r in caplog.records if "replacing its producer" in r.message]
            assert len(renewed) >= 2, caplog.text

            views = len(first_reports.views)
            broker.start()
            wait_until(
                lambda: set(first.live()) == set(second.live()) == {"a", "b"},
                RESTART_LIVENESS + PATIENCE,
                "after the restart the member lost meanwhile is dropped",
            )
            assert all(set(view) >= {"a", "b"} for view in first_reports.views[views:])

            first_reports.heartbeat = Heartbeat(
                Member("a", HostInfo("127.0.0.1", 7001), {("s", 0): 1})
            )
            first.beat_now()
            wait_until(
                lambda: second.live()["a"].member.lags == {("s", 0): 1},
                PATIENCE,
                "heartbeats flow again",
            )
        finally:
            started.close()
