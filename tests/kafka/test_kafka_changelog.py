"""Writer and reader on a real broker: a batch becomes data records and one marker per
changelog partition, and a follower gets units it can apply atomically, recognising replays,
holding unfinished batches and skipping records that do not decode."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from changelog_support import Changelogs, read_events, units_by_partition
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from iqstate_kafka import (
    BatchWriter,
    ChangelogConsumer,
    ChangelogUnit,
    DeliveryError,
    KafkaCluster,
    OffsetOutOfRange,
    Watermarks,
    ensure_changelog_topics,
)
from iqstate_kafka.applying import fold
from iqstate_kafka.format import MARKER_KEY, batch_headers, marker_value, window_data_key
from iqstate_kafka.standalone import StandaloneReplicas
from replica_support import eventually

from iqstate import (
    Application,
    Position,
    QueryableStoreTypes,
    StoreQueryParameters,
    TopicPartition,
)
from iqstate.keyspace import decode_window_key

SOURCE = Position.from_map({"events": {0: 120, 1: 98}})


def assign_all(reader: ChangelogConsumer, changelogs: Changelogs) -> None:
    for partition in changelogs.partitions():
        reader.assign(partition, None)


Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def produce_raw(cluster: KafkaCluster, partition: TopicPartition, records: list[Raw]) -> None:
    """Write `(key, value, headers)` records as a foreign or broken writer would, durably."""
    failures: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "on_delivery": lambda error, _message: failures.append(error) if error else None,
        }
    )
    for key, value, headers in records:
        producer.produce(partition.topic, value, key, partition.partition, headers=headers)
    assert producer.flush(10) == 0
    assert failures == []


def test_a_batch_round_trips_with_markers_on_every_partition(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    entries = {
        ("counts", 0): [(b"apple", b"1"), (b"pear", b"2"), (b"apple", None)],
        ("windows", 1): [(b"sensor", 60_000, b"20.5"), (b"sensor", -1_000, None)],
    }
    with BatchWriter(cluster, changelogs.application_id) as writer:
        ends = writer.write(entries, batch_id=7, position=SOURCE, stores=changelogs.stores)
    counts, windows = changelogs.topics["counts"], changelogs.topics["windows"]
    assert ends == {
        TopicPartition(counts, 0): 4,
        TopicPartition(counts, 1): 1,
        TopicPartition(counts, 2): 1,
        TopicPartition(windows, 0): 1,
        TopicPartition(windows, 1): 3,
    }

    assign_all(reader, changelogs)
    units = units_by_partition(read_events(reader, 5))
    assert {partition: len(found) for partition, found in units.items()} == dict.fromkeys(ends, 1)
    for partition, (unit,) in units.items():
        assert unit.marker is not None
        assert (unit.marker.batch_id, unit.marker.position) == (7, SOURCE)
        assert unit.next_offset == ends[partition]
    assert units[TopicPartition(counts, 0)][0].entries(None) == [
        (b"apple", b"1"),
        (b"pear", b"2"),
        (b"apple", None),
    ]
    window_entries = units[TopicPartition(windows, 1)][0].entries(None)
    assert [(decode_window_key(key), value) for key, value in window_entries] == [
        ((b"sensor", 60_000), b"20.5"),
        ((b"sensor", -1_000), None),
    ]
    for empty in (TopicPartition(counts, 1), TopicPartition(windows, 0)):
        assert units[empty][0].records == []
    assert reader.watermarks(TopicPartition(counts, 0)) == Watermarks(0, 4)


def test_a_replayed_batch_is_recognised_by_its_batch_id(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    """Batch 2 is written twice (a pipeline replaying it): a follower that applies what the
    units tell it ends with each batch applied once."""
    stores = {"counts": 3}
    batches = [(1, b"a"), (2, b"b"), (2, b"b"), (3, b"c")]
    with BatchWriter(cluster, changelogs.application_id) as writer:
        for batch_id, value in batches:
            source = Position.from_map({"events": {0: batch_id * 10}})
            writer.write(
                {("counts", 0): [(b"k", value), (b"k" + value, value)]},
                batch_id=batch_id,
                position=source,
                stores=stores,
            )
    partition = changelogs.partition("counts", 0)
    reader.assign(partition, None)
    units = units_by_partition(read_events(reader, 4))[partition]
    assert [unit.marker.batch_id for unit in units if unit.marker] == [1, 2, 2, 3]

    fence: int | None = None
    applied: list[tuple[bytes, bytes | None]] = []
    skipped = []
    for unit in units:
        assert unit.marker is not None
        if unit.fenced(fence):
            assert unit.entries(fence) == []
            skipped.append(unit.marker.batch_id)
            continue
        applied += unit.entries(fence)
        fence = unit.marker.batch_id
    assert skipped == [2]
    assert applied == [
        *[(b"k", b"a"), (b"ka", b"a")],
        *[(b"k", b"b"), (b"kb", b"b")],
        *[(b"k", b"c"), (b"kc", b"c")],
    ]


def test_late_records_of_an_applied_batch_are_fenced_inside_a_unit(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    """Records of batch 1 that arrive after its marker (a zombie task of a pipeline) end up in
    batch 2's unit; the fence tells them apart."""
    partition = changelogs.partition("counts", 2)
    stores = {"counts": 3}
    with BatchWriter(cluster, changelogs.application_id) as writer:
        writer.write({("counts", 2): [(b"x", b"1")]}, batch_id=1, position=None, stores=stores)
        produce_raw(cluster, partition, [(b"x", b"stale", batch_headers(1))])
        writer.write({("counts", 2): [(b"y", b"2")]}, batch_id=2, position=None, stores=stores)
    reader.assign(partition, None)
    first, second = units_by_partition(read_events(reader, 2))[partition]
    assert first.entries(None) == [(b"x", b"1")]
    assert [(record.key, record.batch_id) for record in second.records] == [(b"x", 1), (b"y", 2)]
    assert second.entries(1) == [(b"y", b"2")]


def test_data_without_its_marker_is_held(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    """A batch interrupted before its markers is not handed out; its replay's marker ends a
    unit that holds both attempts, the replay last."""
    partition = changelogs.partition("windows", 0)
    attempt = [(window_data_key(b"w", start), b"first", batch_headers(4)) for start in (0, 1_000)]
    produce_raw(cluster, partition, attempt)
    reader.assign(partition, None)
    assert read_events(reader, 1, within=3.0) == []

    with BatchWriter(cluster, changelogs.application_id) as writer:
        writer.write(
            {("windows", 0): [(b"w", 0, b"replay")]},
            batch_id=4,
            position=SOURCE,
            stores={"windows": 2},
        )
    (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.marker is not None and unit.marker.batch_id == 4
    assert [(decode_window_key(key), value) for key, value in unit.entries(3)] == [
        ((b"w", 0), b"first"),
        ((b"w", 1_000), b"first"),
        ((b"w", 0), b"replay"),
    ]
    assert unit.next_offset == 4


def test_a_batch_is_held_whole_until_its_marker_however_many_records_it_has(
    cluster: KafkaCluster, changelogs: Changelogs
) -> None:
    """Nothing is missing between its records: a batch being written, applied in one
    commit at its marker, never cut into parts the way a compacted stretch is; exactly
    `max_held_records` of them still fit."""
    partition = changelogs.partition("counts", 1)
    records: list[Raw] = [(b"k%d" % number, b"v", batch_headers(9)) for number in range(5)]
    produce_raw(cluster, partition, records)
    with ChangelogConsumer(cluster, compacted_unit_records=2, max_held_records=5) as reader:
        reader.assign(partition, None)
        assert read_events(reader, 1, within=3.0) == []
        produce_raw(cluster, partition, [(MARKER_KEY, marker_value(9, SOURCE), None)])
        (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.marker is not None and unit.marker.batch_id == 9
    assert unit.entries(8) == [(b"k%d" % number, b"v") for number in range(5)]
    assert unit.next_offset == 6


def produce_in_transactions(
    cluster: KafkaCluster, partition: TopicPartition, transactional_id: str, batches: list[Raw]
) -> None:
    """Each record in a transaction of its own, so that an offset goes missing after each
    (its commit marker, which consumers never see), as where compaction removed records."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id}
    )
    producer.init_transactions(10)
    watermarks = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "tx"})
    where = KafkaTopicPartition(partition.topic, partition.partition)
    try:
        for key, value, headers in batches:
            _, end = watermarks.get_watermark_offsets(where, timeout=10, cached=False)
            producer.begin_transaction()
            producer.produce(partition.topic, value, key, partition.partition, headers=headers)
            producer.commit_transaction(10)
            # The coordinator writes the commit marker after answering: wait for it, so
            # that what is produced next comes after it.
            deadline = time.monotonic() + 10
            while watermarks.get_watermark_offsets(where, timeout=10, cached=False)[1] < end + 2:
                assert time.monotonic() < deadline, "the transaction's commit marker never came"
                time.sleep(0.01)
    finally:
        watermarks.close()


def test_a_compacted_stretch_is_handed_out_in_incomplete_units(
    cluster: KafkaCluster, changelogs: Changelogs, unique_name: Callable[[str], str]
) -> None:
    """Offsets missing since the last marker (what compaction leaves; a transaction's commit
    marker, invisible to consumers, leaves the same) mean the markers in between are gone:
    the data is handed out every `compacted_unit_records`, without a position or fence."""
    partition = changelogs.partition("counts", 2)
    records: list[Raw] = [(b"k%d" % number, b"v", batch_headers(2)) for number in range(3)]
    produce_in_transactions(cluster, partition, unique_name("tx"), records)  # 0, 2, 4
    produce_raw(cluster, partition, [*records, (MARKER_KEY, marker_value(2, SOURCE), None)])
    with ChangelogConsumer(cluster, compacted_unit_records=2, max_held_records=100) as reader:
        reader.assign(partition, None)
        units = units_by_partition(read_events(reader, 3))[partition]
    assert [(unit.offsets, unit.marker is None, unit.next_offset) for unit in units] == [
        ([0, 2], True, 3),  # whole until offset 1 is found missing
        ([4, 6], True, 7),
        ([7, 8], True, 9),
        ([], False, 10),
    ]
    assert all(unit.compacted for unit in units)


def test_a_replica_that_stopped_inside_a_compacted_stretch_resumes_it_as_one(
    cluster: KafkaCluster, changelogs: Changelogs, unique_name: Callable[[str], str]
) -> None:
    """A replica at batch 1 whose changelog lost the markers of batch 2 to compaction is
    given the stretch in parts; it commits one and restarts. Reading on from its committed
    offset, nothing is missing before batch 3's marker, which skips ahead of its fence: only
    looking back at the record before the committed offset (a data record, not a marker)
    tells the reader it is still inside the stretch, so the marker is applied, not refused
    as a gap (which would have refused every later marker too)."""
    partition = changelogs.partition("counts", 0)
    produce_raw(cluster, partition, [(MARKER_KEY, marker_value(1, SOURCE), None)])  # 0
    produce_in_transactions(cluster, partition, unique_name("tx"), [(b"a", b"2", batch_headers(2))])
    tail: list[Raw] = [(b"b", b"3", batch_headers(3)), (b"c", b"3", batch_headers(3))]
    produce_raw(cluster, partition, [*tail, (MARKER_KEY, marker_value(3, SOURCE), None)])
    with ChangelogConsumer(cluster, compacted_unit_records=2) as reader:
        reader.assign(partition, 1, look_back=True)  # after batch 1's marker: as usual
        first, *_ = units_by_partition(read_events(reader, 1))[partition]
    assert (first.offsets, first.marker, first.compacted) == ([1, 3], None, True)

    def resumed(look_back: bool) -> ChangelogUnit:
        with ChangelogConsumer(cluster, compacted_unit_records=2) as reader:
            reader.assign(partition, first.next_offset, look_back=look_back)
            (unit,) = units_by_partition(read_events(reader, 1))[partition]
        return unit

    blind = fold([resumed(False)], 1)
    assert (blind.batch_id, blind.entries, [r.reason for r in blind.refused]) == (
        None, [], ["gap", "gap"],
    )  # fmt: skip
    unit = resumed(True)
    assert (unit.offsets, unit.compacted) == ([4], True)
    commit = fold([unit], 1)
    assert (commit.batch_id, commit.entries, commit.refused) == (3, [(b"c", b"3")], ())


def test_a_look_back_at_a_record_retention_removed_reads_on_from_the_offset(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """Retention can remove the record before a committed offset that is still in the log
    (after the follower checked it): the reader reads on from the offset, as after a
    stretch, instead of reporting the offset gone, which would rebuild the replica."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    partition = TopicPartition(unique_name("retained"), 0)  # Kafka deletes records only
    (created,) = admin.create_topics([NewTopic(partition.topic, 1, 1)]).values()  # uncompacted
    created.result(10)
    produce_raw(cluster, partition, [
        (b"a", b"1", batch_headers(1)), (MARKER_KEY, marker_value(1, SOURCE), None),
        (b"b", b"2", batch_headers(2)), (MARKER_KEY, marker_value(2, SOURCE), None),
    ])  # fmt: skip
    (deleted,) = admin.delete_records(
        [KafkaTopicPartition(partition.topic, partition.partition, 2)]
    ).values()
    deleted.result(10)
    with ChangelogConsumer(cluster) as reader:
        reader.assign(partition, 2, look_back=True)
        (event,) = read_events(reader, 1)
    assert isinstance(event, ChangelogUnit) and event.partition == partition
    assert (event.offsets, event.next_offset, event.compacted) == ([2], 4, True)
    assert event.marker is not None and event.marker.batch_id == 2


def test_beyond_max_held_records_the_partition_holding_most_is_cut_short_with_a_warning(
    cluster: KafkaCluster, changelogs: Changelogs, caplog: pytest.LogCaptureFixture
) -> None:
    """The bound on memory is across partitions; the batch it cuts is named in a warning
    (once a batch), and queries can see part of that batch until its marker."""
    big, small = changelogs.partition("counts", 0), changelogs.partition("counts", 1)
    produce_raw(cluster, big, [(b"b%d" % n, b"v", batch_headers(4)) for n in range(5)])
    produce_raw(cluster, small, [(b"s", b"v", batch_headers(4))])
    with (
        caplog.at_level(logging.WARNING, logger="iqstate_kafka.reader"),
        ChangelogConsumer(cluster, max_held_records=4) as reader,
    ):
        reader.assign(big, None)
        reader.assign(small, None)
        (cut,) = read_events(reader, 1)
        for partition in (big, small):
            produce_raw(cluster, partition, [(MARKER_KEY, marker_value(4, SOURCE), None)])
        ended = units_by_partition(read_events(reader, 2))
    assert isinstance(cut, ChangelogUnit) and cut.partition == big
    assert cut.marker is None and not cut.compacted and len(cut.offsets) in (4, 5)
    (rest,) = ended[big]
    assert rest.marker is not None and cut.offsets + rest.offsets == [0, 1, 2, 3, 4]
    (whole,) = ended[small]
    assert whole.marker is not None and whole.offsets == [0]
    (warning,) = [r for r in caplog.records if r.name == "iqstate_kafka.reader"]
    assert warning.levelno == logging.WARNING
    assert "batch 4" in warning.getMessage() and "max_held_records" in warning.getMessage()


def test_a_follower_resumes_from_its_committed_offset(
    cluster: KafkaCluster, changelogs: Changelogs
) -> None:
    """The committed offset is the next one to read: resuming there yields exactly the units
    after the last applied one."""
    partition = changelogs.partition("counts", 0)
    stores = {"counts": 3}
    with BatchWriter(cluster, changelogs.application_id) as writer:
        first = writer.write(
            {("counts", 0): [(b"a", b"1")]}, batch_id=1, position=None, stores=stores
        )
        writer.write({("counts", 0): [(b"b", b"2")]}, batch_id=2, position=None, stores=stores)
    with ChangelogConsumer(cluster) as reader:
        reader.assign(partition, first[partition])
        (unit,) = units_by_partition(read_events(reader, 1))[partition]
        assert unit.marker is not None and unit.marker.batch_id == 2
        assert unit.entries(None) == [(b"b", b"2")]
        watermarks = reader.watermarks(partition)
        assert watermarks == Watermarks(0, 4)
        assert watermarks.contains(first[partition]) and watermarks.contains(4)
        assert watermarks.lag(first[partition]) == 2
        assert watermarks.lag(unit.next_offset) == 0


def test_an_offset_beyond_the_log_is_reported_and_the_partition_dropped(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    """As after a changelog topic was deleted and created again: the replica must rebuild."""
    partition = changelogs.partition("counts", 2)
    with BatchWriter(cluster, changelogs.application_id) as writer:
        writer.write({}, batch_id=1, position=None, stores={"counts": 3})
    assert not reader.watermarks(partition).contains(50)
    reader.assign(partition, 50)
    assert read_events(reader, 1) == [OffsetOutOfRange(partition, 50)]
    assert partition not in reader.assignment
    reader.assign(partition, None)
    (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.marker is not None and unit.marker.batch_id == 1


def test_undecodable_records_are_skipped_counted_and_logged(
    cluster: KafkaCluster,
    changelogs: Changelogs,
    reader: ChangelogConsumer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    partition = changelogs.partition("counts", 1)
    newer = [("iqstate.batch", b"\x02" + bytes(8))]
    foreign: list[Raw] = [
        (b"k", b"no header", None),
        (b"k", b"a newer format", newer),
        (MARKER_KEY, b"\x07garbage", None),
    ]
    produce_raw(cluster, partition, foreign)
    with BatchWriter(cluster, changelogs.application_id) as writer:
        writer.write(
            {("counts", 1): [(b"good", b"1")]}, batch_id=1, position=None, stores={"counts": 3}
        )
    with caplog.at_level(logging.ERROR, logger="iqstate_kafka.reader"):
        reader.assign(partition, None)
        (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.entries(None) == [(b"good", b"1")]
    assert unit.next_offset == 5
    assert reader.skipped(partition) == 3
    where = f"changelog record at {partition.topic} partition 1 offset"
    assert [record.getMessage().split(" does not decode: ")[0] for record in caplog.records] == [
        f"{where} 0",
        f"{where} 1",
        f"{where} 2",
    ]


def test_bad_batches_are_refused_and_leave_nothing_behind(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    stores = {"counts": 3}
    with BatchWriter(cluster, changelogs.application_id) as writer:
        with pytest.raises(ValueError, match="store 'windows', which is not among the stores"):
            writer.write(
                {("windows", 0): [(b"k", 0, b"v")]}, batch_id=1, position=None, stores=stores
            )
        with pytest.raises(ValueError, match="store 'counts' partition 3, which does not exist"):
            writer.write({("counts", 3): [(b"k", b"v")]}, batch_id=1, position=None, stores=stores)
        with pytest.raises(ValueError, match="reserved for the changelog's batch markers"):
            writer.write(
                {("counts", 0): [(MARKER_KEY, b"v")]}, batch_id=1, position=None, stores=stores
            )
        too_large = [(b"k", b"x" * 2_000_000)]  # the broker's limit is 1 MB
        with pytest.raises(DeliveryError, match="for .*-counts-changelog partition 0 was refused"):
            writer.write({("counts", 0): too_large}, batch_id=1, position=None, stores=stores)
        writer.write({("counts", 0): [(b"k", b"v")]}, batch_id=1, position=None, stores=stores)
    partition = changelogs.partition("counts", 0)
    reader.assign(partition, None)
    (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.entries(None) == [(b"k", b"v")]
    assert unit.next_offset == 2


def test_data_from_several_writers_is_one_unit_once_the_markers_follow(
    cluster: KafkaCluster, changelogs: Changelogs, reader: ChangelogConsumer
) -> None:
    """Spark's way: each task writes its share of a batch with `write_data` (no markers),
    and once all are durable one writer adds the markers: the reader gets one unit per
    partition with every task's records, nothing before the markers."""
    stores = {"counts": 3}
    tasks = [
        [(("counts", 0), [(b"a", b"1")]), (("counts", 2), [(b"b", b"2")])],
        iter([(("counts", 0), [(b"c", b"3"), (b"a", None)])]),  # a generator is fine too
    ]
    for chunks in tasks:
        with BatchWriter(cluster, changelogs.application_id) as writer:
            written = writer.write_data(chunks, batch_id=5, stores=stores)
        assert written == 2
    partition = changelogs.partition("counts", 0)
    reader.assign(partition, None)
    assert read_events(reader, 1, within=2) == [], "no unit before the markers"
    with BatchWriter(cluster, changelogs.application_id) as writer:
        writer.write({}, batch_id=5, position=SOURCE, stores=stores)
    (unit,) = units_by_partition(read_events(reader, 1))[partition]
    assert unit.marker is not None and unit.marker.batch_id == 5
    assert unit.entries(None) == [(b"a", b"1"), (b"c", b"3"), (b"a", None)]
    with (
        BatchWriter(cluster, changelogs.application_id) as writer,
        pytest.raises(ValueError, match="partition 3, which does not exist"),
    ):
        writer.write_data([(("counts", 3), [(b"x", b"1")])], batch_id=6, stores=stores)


def test_a_batch_the_broker_refused_part_of_gets_no_marker_and_its_replay_restores_it(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The broker refuses the record batch holding one record (over the topic's
    `max.message.bytes`) and takes the later ones. The markers used to follow regardless:
    every replica applied the batch without the refused records, and fenced the replay
    that `DeliveryError` asks for. The markers are written only once every record is
    delivered, so the replay, same id, applies the whole batch."""
    limited = KafkaCluster(
        cluster.bootstrap_servers, timeout=10.0, topic_config={"max.message.bytes": "200000"}
    )
    application_id = unique_name("app")
    topic = ensure_changelog_topics(limited, application_id, {"s": 1})["s"]
    records = [(b"big", b"B" * 300_000)] + [(b"k%05d" % i, b"v") for i in range(10_500)]
    with BatchWriter(limited, application_id) as writer:
        with pytest.raises(DeliveryError, match="too large"):
            writer.write({("s", 0): records}, batch_id=1, position=None, stores={"s": 1})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        larger = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("max.message.bytes", "2000000",
                            incremental_operation=AlterConfigOpType.SET)
            ],
        )  # fmt: skip
        for done in admin.incremental_alter_configs([larger]).values():
            done.result(30)
        writer.write({("s", 0): records}, batch_id=1, position=None, stores={"s": 1})
    app = Application(application_id, tmp_path, cluster=StandaloneReplicas(limited))
    app.key_value_store("s", 1, key_serde="bytes", value_serde="bytes")
    with app:
        store = app.store(
            StoreQueryParameters.from_name_and_type("s", QueryableStoreTypes.key_value_store())
        )
        eventually(lambda: store.get(b"k10499") == b"v", "the replayed batch applied")
        assert store.get(b"big") == b"B" * 300_000 and store.get(b"k00000") == b"v"
        assert store.approximate_num_entries() == 10_501
