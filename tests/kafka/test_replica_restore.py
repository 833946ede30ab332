"""Restore on a real broker, with RocksDB: a restarted replica resumes from the changelog
offset committed inside its store (KIP-1035), so it applies exactly what was written while it
was down; a replica whose files are gone, or whose committed offset the changelog no longer
holds, is rebuilt from the start of the changelog and says so (`LagInfo.rebuilt`)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from iqstate_kafka import BatchWriter, Follower, KafkaCluster, ensure_changelog_topics
from iqstate_kafka import follower as follower_module
from iqstate_kafka.watermarks import Answer, WatermarkAsker
from iqstate_rocksdb import RocksDBKeyValueStore
from replica_support import RecordingCluster, eventually, only_result

from iqstate import Application, KeyQuery, Position, StateQueryRequest, TopicPartition
from iqstate.runtime import ACTIVE, LagInfo
from iqstate.runtime import hosted as hosted_module
from iqstate.runtime.changelog_topic import TopicIds, read_topic_ids
from iqstate.runtime.hosted import HostedPartition

STORE = "counts"
PARTITIONS = 4

Ends = dict[TopicPartition, int]


class Instance:
    """One application instance of id `application_id` over `state_dir`, restartable; the
    only instance, so the active of every partition."""

    def __init__(self, cluster: KafkaCluster, application_id: str, state_dir: Path) -> None:
        self.cluster = cluster
        self.application_id = application_id
        self.state_dir = state_dir
        self.app = self._make()

    def _make(self) -> Application:
        self.recording = RecordingCluster(self.cluster)
        app = Application(
            self.application_id,
            self.state_dir,
            application_server="replica.test:7001",
            cluster=self.recording,
        )
        app.key_value_store(STORE, PARTITIONS, engine="rocksdb", value_serde="int64")
        return app

    @contextmanager
    def running(self) -> Iterator[Follower]:
        """Start a fresh application on the state directory; yield its follower once every
        partition caught up and runs as the active."""
        self.app = self._make()
        with self.app:
            follower = self.recording.follower
            running = {STORE: dict.fromkeys(range(PARTITIONS), ACTIVE)}
            eventually(
                lambda: (
                    all(follower.caught_up(STORE, p) for p in range(PARTITIONS))
                    and self.app.roles() == running
                ),
                "every partition caught up and RUNNING",
                within=120.0,
            )
            yield follower

    def write(self, values: dict[str, int | None], batch_id: int) -> Ends:
        """Write `values` (None deletes) as one batch through the BatchWriter."""
        spec = self.app.stores[STORE]
        entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
        for key, value in values.items():
            raw = spec.key_serde.serialize(key)
            encoded = None if value is None else spec.value_serde.serialize(value)
            entries.setdefault((STORE, spec.partition_of(key, raw)), []).append((raw, encoded))
        with BatchWriter(self.cluster, self.application_id) as writer:
            return writer.write(
                entries,
                batch_id=batch_id,
                position=Position.from_map({"source": {0: batch_id}}),
                stores={STORE: PARTITIONS},
            )

    def value(self, key: str) -> int | None:
        request = StateQueryRequest.in_store(STORE).with_query(KeyQuery.with_key(key))
        result = only_result(self.app.query(request))
        assert result.is_success, result.failure_message
        return result.result  # type: ignore[no-any-return]

    def lags(self) -> dict[int, LagInfo]:
        return self.app.all_local_store_partition_lags()[STORE]


@pytest.fixture
def instance(cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]) -> Instance:
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    return Instance(cluster, application_id, tmp_path / "state")


def _at_end(instance: Instance, ends: Ends, rebuilt: bool = False) -> bool:
    topic = f"{instance.application_id}-{STORE}-changelog"
    return instance.lags() == {
        p: LagInfo(ends[TopicPartition(topic, p)], ends[TopicPartition(topic, p)], rebuilt)
        for p in range(PARTITIONS)
    }


def assert_at_end(instance: Instance, ends: Ends, rebuilt: bool = False) -> None:
    """Every partition committed the end of its changelog (`ends`, from the writer)."""
    assert _at_end(instance, ends, rebuilt), instance.lags()


def test_a_restarted_replica_applies_exactly_what_was_written_while_it_was_down(
    instance: Instance,
) -> None:
    total = 1_000_000
    chunk = 100_000
    for batch_id, start in enumerate(range(0, total, chunk)):
        ends = instance.write({f"key-{n}": n for n in range(start, start + chunk)}, batch_id)

    with instance.running() as follower:
        assert follower.applied_records == total
        assert instance.value("key-0") == 0 and instance.value("key-999999") == 999_999
        assert_at_end(instance, ends)

    with instance.running() as follower:
        assert follower.applied_records == 0, "nothing was written while it was down"
        assert instance.value("key-123456") == 123_456
        assert_at_end(instance, ends)

    while_down = {f"key-{n}": -n for n in range(500)} | {f"new-{n}": n for n in range(700)}
    instance.write(dict(list(while_down.items())[:600]), batch_id=10)
    ends = instance.write(dict(list(while_down.items())[600:]) | {"key-7": None}, batch_id=11)
    with instance.running() as follower:
        assert follower.applied_records == len(while_down) + 1
        assert instance.value("key-499") == -499 and instance.value("key-500") == 500
        assert instance.value("new-699") == 699 and instance.value("key-7") is None
        assert_at_end(instance, ends)


def test_a_replica_whose_files_were_deleted_is_rebuilt_from_the_changelog(
    instance: Instance,
) -> None:
    values = {f"key-{n}": n for n in range(1_000)}
    ends = instance.write(values, batch_id=1)
    with instance.running():
        pass
    store_directory = instance.state_dir / instance.application_id / STORE
    for partition in range(PARTITIONS):
        shutil.rmtree(store_directory / str(partition))

    with instance.running() as follower:
        assert follower.applied_records == len(values)
        assert instance.value("key-999") == 999
        assert_at_end(instance, ends, rebuilt=True)


def test_a_replica_whose_state_directory_was_deleted_restores_everything(
    instance: Instance,
) -> None:
    """Nothing is left to tell it ever held state: it restores as a new replica."""
    values = {f"key-{n}": n for n in range(1_000)}
    ends = instance.write(values, batch_id=1)
    with instance.running():
        pass
    shutil.rmtree(instance.state_dir)

    with instance.running() as follower:
        assert follower.applied_records == len(values)
        assert instance.value("key-0") == 0
        assert_at_end(instance, ends)


def recreate_topic(cluster: KafkaCluster, application_id: str) -> None:
    """Delete the changelog topic and create it again, empty (bounded waits)."""
    topic = f"{application_id}-{STORE}-changelog"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)
    eventually(lambda: topic not in admin.list_topics(timeout=10).topics, f"{topic} deleted", 30.0)
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})


def test_a_committed_offset_beyond_a_recreated_changelog_means_a_rebuild(
    instance: Instance,
) -> None:
    instance.write({f"old-{n}": n for n in range(100)}, batch_id=1)
    instance.write({f"old-{n}": -n for n in range(100)}, batch_id=2)
    with instance.running():
        pass
    recreate_topic(instance.cluster, instance.application_id)
    ends = instance.write({"new": 1}, batch_id=1)

    with instance.running() as follower:
        assert follower.applied_records == 1
        assert instance.value("new") == 1
        assert instance.value("old-5") is None, "the old replica's data was set aside"
        assert_at_end(instance, ends, rebuilt=True)


def test_a_changelog_recreated_longer_than_the_replica_had_read_means_a_rebuild(
    instance: Instance,
) -> None:
    """The replica's committed offsets lie inside the new topic's: only the topic's id
    (KIP-516) tells that they count records of another topic."""
    old_ends = instance.write({f"old-{n}": n for n in range(100)}, batch_id=1)
    with instance.running():
        pass
    old_id = topic_id(instance)
    assert kept_topic_ids(instance) == {old_id}
    recreate_topic(instance.cluster, instance.application_id)
    instance.write({f"new-{n}": n for n in range(400)}, batch_id=1)
    ends = instance.write({f"new-{n}": -n for n in range(400)}, batch_id=2)
    assert all(ends[tp] > old_ends[tp] for tp in ends), "each partition's new log is longer"

    with instance.running() as follower:
        assert instance.value("old-5") is None, "the old replica's data was set aside"
        assert instance.value("new-5") == -5
        assert follower.applied_records == 800
        assert_at_end(instance, ends, rebuilt=True)
    new_id = topic_id(instance)
    assert new_id != old_id and kept_topic_ids(instance) == {new_id}


class StaleTopicIds(WatermarkAsker):
    """The real asker, except that the next `stale` answers (set with `lag_for`) name
    another id for the topic, as a broker whose metadata lags behind a recreation might."""

    OTHER_ID = "c3RhbGUtbWV0YWRhdGEtaWQ"
    _stale = 0
    _lock = threading.Lock()  # the test's thread sets it, the follower's counts it down

    @classmethod
    def lag_for(cls, answers: int) -> None:
        with cls._lock:
            cls._stale = answers

    @classmethod
    def lagging(cls) -> bool:
        with cls._lock:
            return cls._stale > 0

    def answers(self) -> dict[TopicPartition, Answer]:
        answers = super().answers()
        with StaleTopicIds._lock:
            self.stale_now = bool(answers) and StaleTopicIds._stale > 0
            StaleTopicIds._stale -= self.stale_now
        return answers

    def topic_id(self, topic: str) -> str | None:
        return self.OTHER_ID if getattr(self, "stale_now", False) else super().topic_id(topic)


def test_one_answer_naming_another_topic_id_rebuilds_nothing_and_two_rebuild_once(
    instance: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follower_module, "WatermarkAsker", StaleTopicIds)
    ends = instance.write({f"key-{n}": n for n in range(100)}, batch_id=1)
    with instance.running() as follower:
        rebuilt: list[tuple[str, int]] = []
        follower.on_rebuilt(rebuilt.append)
        real_id = topic_id(instance)
        StaleTopicIds.lag_for(1)
        eventually(lambda: not StaleTopicIds.lagging(), "the lagging answer given")
        ends = instance.write({"key-1": -1}, batch_id=2)
        eventually(lambda: _at_end(instance, ends), "the next batch applied")
        assert rebuilt == [] and follower.applied_records == 101
        assert instance.value("key-5") == 5 and kept_topic_ids(instance) == {real_id}

        StaleTopicIds.lag_for(2)  # two in a row: the topic was recreated, as far as it knows
        eventually(lambda: _at_end(instance, ends, rebuilt=True), "rebuilt to the end")
        assert instance.value("key-1") == -1 and instance.value("key-5") == 5
        ends = instance.write({"key-2": -2}, batch_id=3)
        eventually(lambda: _at_end(instance, ends, rebuilt=True), "reading on")
        # Once each: the real id, named again after the lagging ones, is one it replaced.
        assert sorted(rebuilt) == [(STORE, p) for p in range(PARTITIONS)]
        assert kept_topic_ids(instance) == {StaleTopicIds.OTHER_ID}


def topic_id(instance: Instance) -> str:
    """The id the broker gives the changelog topic now."""
    topic = f"{instance.application_id}-{STORE}-changelog"
    admin = AdminClient({"bootstrap.servers": instance.cluster.bootstrap_servers})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    return str(described.topic_id)


def kept_topic_ids(instance: Instance) -> set[str | None]:
    """The changelog topic ids the partitions' replicas keep beside their files."""
    store_directory = instance.state_dir / instance.application_id / STORE
    return {read_topic_ids(store_directory / str(p)).kept for p in range(PARTITIONS)}


def test_a_replica_whose_topic_id_cannot_be_written_waits_alone(
    instance: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under one partition: it reads nothing until its topic id is written (a
    restart could not tell a recreated topic otherwise); the others are not held up."""
    ends = instance.write({f"key-{n}": n for n in range(100)}, batch_id=1)
    keep = HostedPartition.keep_changelog_topic_ids
    disk_full = threading.Event()
    disk_full.set()

    def refusing(hosted: HostedPartition, ids: TopicIds) -> None:
        if hosted.partition == 0 and disk_full.is_set():
            raise OSError(28, "No space left on device")
        keep(hosted, ids)

    monkeypatch.setattr(HostedPartition, "keep_changelog_topic_ids", refusing)
    instance.app = instance._make()
    with instance.app:
        follower = instance.recording.follower
        eventually(lambda: all(follower.caught_up(STORE, p) for p in (1, 2, 3)), "the others")
        time.sleep(1.0)  # a few more answers
        assert not follower.caught_up(STORE, 0) and instance.lags()[0].offset_lag != 0
        disk_full.clear()
        eventually(lambda: _at_end(instance, ends), "partition 0 once its id is written", 60.0)
    assert kept_topic_ids(instance) == {topic_id(instance)}


def test_a_changelog_recreated_while_following_means_a_rebuild(instance: Instance) -> None:
    instance.write({f"old-{n}": n for n in range(100)}, batch_id=1)
    with instance.running() as follower:
        recreate_topic(instance.cluster, instance.application_id)
        ends = instance.write({"new": 1}, batch_id=1)
        # Each partition is rebuilt on its own: from an offset the new topic lacks, or once
        # two answers give the topic's new id (a partition of the old topic answers until then).
        eventually(lambda: all(lag.rebuilt for lag in instance.lags().values()), "rebuilt", 60.0)
        eventually(lambda: _at_end(instance, ends, rebuilt=True), "every partition at the end")
        assert instance.value("new") == 1 and instance.value("old-5") is None
        assert follower.applied_records == 101


def test_a_replica_whose_rebuild_fails_waits_alone_and_is_rebuilt_later(
    instance: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under one partition while the changelog is recreated: its rebuild fails
    after its old files were set aside, it serves nothing from them and reads nothing; the
    others are rebuilt and catch up meanwhile, and it is rebuilt once the disk takes the
    write."""
    instance.write({f"old-{n}": n for n in range(100)}, batch_id=1)
    keep = hosted_module.keep_topic_ids
    disk_full = threading.Event()
    disk_full.set()

    def refusing(directory: Path, ids: TopicIds) -> None:
        if directory.name == "0" and disk_full.is_set():
            raise OSError(28, "No space left on device")
        keep(directory, ids)

    with instance.running() as follower:
        monkeypatch.setattr(hosted_module, "keep_topic_ids", refusing)
        recreate_topic(instance.cluster, instance.application_id)
        ends = instance.write({f"new-{n}": n for n in range(150)}, batch_id=1)
        others = (1, 2, 3)
        eventually(
            lambda: (
                all(instance.lags()[p].rebuilt for p in others)
                and all(follower.caught_up(STORE, p) for p in others)
            ),
            "the other partitions rebuilt and caught up",
            60.0,
        )
        time.sleep(1.0)  # a few more answers, and a retry or two
        assert not follower.caught_up(STORE, 0)
        assert instance.lags()[0].current_offset_position == 0, "nothing committed"
        request = StateQueryRequest.in_store(STORE).with_query(KeyQuery.with_key("old-5"))
        for partition in range(PARTITIONS):
            answered = instance.app.query(request.with_partitions([partition]))
            result = answered.partition_results[partition]
            assert not (result.is_success and result.result is not None), "an old value"
        disk_full.clear()
        eventually(lambda: _at_end(instance, ends, rebuilt=True), "partition 0 rebuilt", 60.0)
        assert instance.value("old-5") is None
        assert all(instance.value(f"new-{n}") == n for n in range(150))
        new_id = topic_id(instance)
        eventually(lambda: kept_topic_ids(instance) == {new_id}, "every replica keeps the new id")


def test_a_restored_replica_is_settled_once_and_one_at_the_tail_is_not(
    instance: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restore the engine moves its write buffers to table files (RocksDB flushes
    its memtables, which every lookup would otherwise search first); the few records a
    replica applies at the tail do not flush each time."""
    settled: list[int] = []
    settle = RocksDBKeyValueStore.settle

    def recorded(store: RocksDBKeyValueStore) -> None:
        settled.append(store.memtable_entries)
        settle(store)

    monkeypatch.setattr(RocksDBKeyValueStore, "settle", recorded)
    monkeypatch.setattr(follower_module, "SETTLE_AFTER", 50)
    instance.write({f"key-{n}": n for n in range(800)}, batch_id=1)  # ~200 per partition
    with instance.running():
        eventually(lambda: len(settled) == PARTITIONS, "every restored partition settled")
        assert all(entries > 0 for entries in settled), "each held its restore in memtables"
        ends = instance.write({"late": 1, "later": 2}, batch_id=2)
        eventually(lambda: _at_end(instance, ends), "the tail applied")
        assert instance.value("late") == 1 and instance.value("key-799") == 799
        time.sleep(0.5)  # a few more follower loops
        assert len(settled) == PARTITIONS, "two records at the tail settle nothing"
