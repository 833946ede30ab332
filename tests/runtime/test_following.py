"""A hosted partition that follows a changelog kept elsewhere (distributed mode's replicas).

The follower hands it units read from the changelog; each is applied and committed with
the offset to read next and, at a batch marker, the batch's position and fence, in one
store commit. These tests drive that seam directly, with a real RocksDB engine.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from iqstate import Application, KeyQuery, Position, PositionBound, QueryConfig
from iqstate.context import StateStoreContext
from iqstate.layers.chain import StoreChain
from iqstate.persistent import UncleanShutdownError
from iqstate.plugins import default_registry
from iqstate.position import TopicPartition
from iqstate.runtime import ACTIVE
from iqstate.runtime.changelog_topic import TOPIC_IDS_FILE, TopicIds
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.offsets import OffsetKeeper
from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.feed import ChangeBufferSettings, PublishedBatch

TP = TopicPartition("app-s-changelog", 0)


def declared(tmp_path: Path) -> StoreSpec:
    app = Application("app", tmp_path)
    return app.key_value_store("s", 1, engine="rocksdb", value_serde="int64")


def followed(tmp_path: Path, spec: StoreSpec) -> HostedPartition:
    directory = tmp_path / "app" / "s" / "0"
    directory.mkdir(parents=True, exist_ok=True)
    context = StateStoreContext(
        application_id="app",
        store_name="s",
        partition=0,
        directory=directory,
        changelog_partition=TP,
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(
        spec, 0, ACTIVE, context, CommittedPartitions(tmp_path / "app" / "s"), followed=True
    )
    hosted.open()
    return hosted


def value(hosted: HostedPartition, key: str) -> object:
    result = hosted.chain.query(
        KeyQuery.with_key(key), PositionBound.unbounded(), QueryConfig.DEFAULT
    )
    return result.result


def encoded(spec: StoreSpec, key: str, number: int | None) -> tuple[bytes, bytes | None]:
    return (
        spec.key_serde.serialize(key),
        None if number is None else spec.value_serde.serialize(number),
    )


def test_units_commit_data_offset_position_and_fence_together(tmp_path: Path) -> None:
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.apply_changelog(
        [encoded(spec, "a", 1), encoded(spec, "b", 2)], 1, Position.from_map({"in": {0: 10}}), 3
    )
    assert value(hosted, "a") == 1 and value(hosted, "b") == 2
    assert hosted.fence == 1 and hosted.committed_changelog_offset() == 3
    assert hosted.chain.position == Position.from_map({"in": {0: 10}})

    # A replayed batch (its id at or below the fence) moves only the offset.
    hosted.apply_changelog([], 1, Position.from_map({"in": {0: 10}}), 6)
    assert hosted.fence == 1 and hosted.committed_changelog_offset() == 6
    # Data held beyond a marker (an incomplete unit) applies without position or fence.
    hosted.apply_changelog([encoded(spec, "a", None)], None, None, 7)
    assert value(hosted, "a") is None and hosted.fence == 1
    assert hosted.chain.position == Position.from_map({"in": {0: 10}})
    hosted.close()

    reopened = followed(tmp_path, spec)
    assert value(reopened, "b") == 2 and value(reopened, "a") is None
    assert reopened.fence == 1 and reopened.committed_changelog_offset() == 7
    assert not reopened.rebuilt
    reopened.close()


def test_changelog_and_pipeline_batches_keep_one_commit_contract(tmp_path: Path) -> None:
    """Whether a batch comes from the pipeline (`apply`) or from the changelog
    (`apply_changelog`), its commit ends the same way: the partition is recorded as holding
    committed data, and the stores' commit callbacks run (the contract in context.py)."""
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    callbacks: list[int | None] = []
    hosted.context.register(object(), lambda: callbacks.append(hosted.fence))  # type: ignore[arg-type]

    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    assert callbacks == [1]
    assert 0 in CommittedPartitions(tmp_path / "app" / "s")
    hosted.apply_changelog([], 1, None, 3)  # a replayed marker: the offset moves, and commits
    assert callbacks == [1, 1]
    assert hosted.apply([encoded(spec, "b", 2)], Position.from_map({"in": {0: 2}}), 2, None)
    assert callbacks == [1, 1, 2]
    assert not hosted.apply([encoded(spec, "b", 3)], None, 2, None)  # fenced: no commit
    assert callbacks == [1, 1, 2]
    assert value(hosted, "b") == 2
    hosted.close()


def moved_aside(tmp_path: Path) -> list[Path]:
    """The directories partition 0's files were moved to by rebuilds."""
    return [p for p in (tmp_path / "app" / "s").iterdir() if ".untrusted-" in p.name]


def test_rebuild_moves_the_files_aside_and_starts_empty(tmp_path: Path) -> None:
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.apply_changelog([encoded(spec, "a", 1)], 4, Position.from_map({"in": {0: 1}}), 2)
    hosted.rebuild(TopicIds())
    assert hosted.rebuilt and hosted.fence is None
    assert hosted.committed_changelog_offset() is None and value(hosted, "a") is None
    assert len(moved_aside(tmp_path)) == 1, "the old files are kept"
    hosted.apply_changelog([encoded(spec, "a", 5)], 4, Position.from_map({"in": {0: 1}}), 2)
    assert value(hosted, "a") == 5
    hosted.close()


def test_the_changelog_topic_ids_outlive_a_restart_and_a_rebuild_keeps_those_it_is_given(
    tmp_path: Path,
) -> None:
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    assert hosted.changelog_topic_ids == TopicIds()
    ids = TopicIds("new-id", frozenset({"old-id"}))
    hosted.keep_changelog_topic_ids(ids)
    hosted.close()
    again = followed(tmp_path, spec)
    assert again.changelog_topic_ids == ids
    moved = ids.moved_to("newer-id")
    again.rebuild(moved)
    # Written with the new files before they opened: a crash right after keeps them too.
    assert again.changelog_topic_ids == moved
    assert moved.replaced == {"old-id", "new-id"}
    again.close()
    assert followed(tmp_path, spec).changelog_topic_ids == moved


def test_a_rebuild_that_fails_answers_nothing_old_and_can_be_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk in the middle of a rebuild: the old files are set aside once, the
    partition serves nothing from them, and the retry rebuilds it without setting aside
    another copy."""
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.apply_changelog([encoded(spec, "a", 1)], 4, Position.from_map({"in": {0: 1}}), 2)

    def disk_full(directory: Path, ids: TopicIds) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("iqstate.runtime.hosted.keep_topic_ids", disk_full)
    with pytest.raises(OSError, match="No space"):
        hosted.rebuild(TopicIds("id"))
    with pytest.raises(Exception, match="closed"):
        value(hosted, "a")
    assert hosted.committed_changelog_offset() is None and hosted.fence is None
    monkeypatch.undo()
    hosted.rebuild(TopicIds("id"))
    assert value(hosted, "a") is None and hosted.committed_changelog_offset() is None
    assert hosted.changelog_topic_ids == TopicIds("id")
    assert len(moved_aside(tmp_path)) == 1, "the old files are set aside once, and kept"
    hosted.apply_changelog([encoded(spec, "a", 5)], 4, Position.from_map({"in": {0: 1}}), 2)
    assert value(hosted, "a") == 5
    hosted.close()


def test_a_rebuild_ends_the_subscriptions_and_the_next_ones_name_the_topic(
    tmp_path: Path,
) -> None:
    """What a subscription announced is gone from a rebuilt store, and a cursor's offsets in
    a topic deleted and created again say nothing about the new one: subscriptions end, and
    the next ones name the topic's id in their lineage (a cursor of another resumes from a
    snapshot)."""
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.keep_changelog_topic_ids(TopicIds("old-id"))
    settings = ChangeBufferSettings()
    before = hosted.follow_changes(settings, lambda feed, chain: feed)
    assert before.lineage == "log:old-id"
    hosted.rebuild(TopicIds("old-id").moved_to("new-id"))
    assert before.ended is not None and "rebuilt" in before.ended
    after = hosted.follow_changes(settings, lambda feed, chain: feed)
    assert after is not before and after.ended is None
    assert after.lineage == "log:new-id"
    hosted.close()


def test_a_damaged_topic_ids_file_reads_as_an_id_no_topic_has(tmp_path: Path) -> None:
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.close()
    (tmp_path / "app" / "s" / "0" / TOPIC_IDS_FILE).write_bytes(b"\xff\xfe\x00id\n")
    kept = followed(tmp_path, spec).changelog_topic_ids.kept
    assert kept is not None and kept not in ("", "id")


def test_an_in_memory_replica_is_rebuilt_in_memory(tmp_path: Path) -> None:
    app = Application("app", tmp_path)
    spec = app.key_value_store("m", 1, engine="memory", value_serde="int64")
    context = StateStoreContext(
        application_id="app",
        store_name="m",
        partition=0,
        changelog_partition=TopicPartition("app-m-changelog", 0),
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(spec, 0, ACTIVE, context, followed=True)
    hosted.open()
    hosted.keep_changelog_topic_ids(TopicIds("id"))
    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    hosted.rebuild(TopicIds("id").moved_to("new-id"))
    assert hosted.rebuilt and not hosted.closed and hosted.fence is None
    assert value(hosted, "a") is None
    assert hosted.changelog_topic_ids == TopicIds("new-id", frozenset({"id"}))
    hosted.apply_changelog([encoded(spec, "a", 5)], 1, Position.from_map({"in": {0: 1}}), 2)
    assert value(hosted, "a") == 5
    hosted.close()


def test_a_followed_partition_whose_files_vanished_is_rebuilt_not_refused(
    tmp_path: Path,
) -> None:
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    hosted.close()
    shutil.rmtree(tmp_path / "app" / "s" / "0")
    again = followed(tmp_path, spec)
    assert again.rebuilt and again.committed_changelog_offset() is None
    again.close()


def test_an_application_with_a_cluster_refuses_single_machine_changelogs(tmp_path: Path) -> None:
    class UnusedCluster:
        def connect(self, member: object) -> object:
            raise AssertionError("the arguments are refused before connecting")

    with pytest.raises(ValueError, match="either cluster"):
        Application("app", tmp_path, cluster=UnusedCluster(), changelog=object())  # type: ignore[arg-type]


def test_a_commit_whose_record_fails_afterwards_still_reaches_the_subscriptions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store commit is durable before the record of committed partitions is written:
    when that write fails (a full disk), the follower reads on from past the batch, so the
    batch is announced now or never."""
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    feed = hosted.follow_changes(ChangeBufferSettings(), lambda feed, chain: feed)
    start = feed.head

    def disk_full(self: CommittedPartitions, partition: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CommittedPartitions, "add", disk_full)
    with pytest.raises(OSError, match="No space"):
        hosted.apply_changelog([encoded(spec, "a", 1)], 4, Position.from_map({"in": {0: 1}}), 2)
    assert value(hosted, "a") == 1 and hosted.committed_changelog_offset() == 2
    announced, _ = feed.read(start)
    assert isinstance(announced, PublishedBatch)
    assert announced.entries == [encoded(spec, "a", 1)] and announced.mark == 2
    monkeypatch.undo()
    hosted.apply_changelog([encoded(spec, "b", 2)], 5, Position.from_map({"in": {0: 2}}), 4)
    assert value(hosted, "b") == 2
    assert 0 in CommittedPartitions(tmp_path / "app" / "s"), "recorded at the next commit"
    hosted.close()


def _fail_the_next_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next store commit raises as a full disk makes it (the engine discards the
    unit's writes); the ones after succeed."""
    commit = OffsetKeeper.commit

    def full_once(self: OffsetKeeper, changes: dict[TopicPartition, int | None]) -> None:
        monkeypatch.setattr(OffsetKeeper, "commit", commit)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(OffsetKeeper, "commit", full_once)


def test_an_in_memory_replica_whose_commit_failed_keeps_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is opened again in memory (that would be an empty store): the retry of the
    unit writes its records again over what the store holds."""
    app = Application("app", tmp_path)
    spec = app.key_value_store("m", 1, engine="memory", value_serde="int64")
    context = StateStoreContext(
        application_id="app", store_name="m", partition=0,
        changelog_partition=TopicPartition("app-m-changelog", 0),
        query_handlers=default_registry().query_handlers,
    )  # fmt: skip
    hosted = HostedPartition(spec, 0, ACTIVE, context, followed=True)
    hosted.open()
    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    _fail_the_next_commit(monkeypatch)
    unit = ([encoded(spec, "b", 2)], 2, Position.from_map({"in": {0: 2}}), 4)
    with pytest.raises(OSError, match="No space"):
        hosted.apply_changelog(*unit)
    hosted.apply_changelog(*unit)  # the follower's retry
    assert value(hosted, "a") == 1 and value(hosted, "b") == 2
    assert hosted.committed_changelog_offset() == 4 and hosted.fence == 2
    hosted.close()


def test_files_not_to_be_trusted_after_a_failed_commit_are_set_aside_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine without atomic commits cannot be trusted once a write failed (its files
    may hold part of the unit): opened again, it is set aside and the partition rebuilt,
    a restoring active until it has caught up; the retry raises, and the follower reads
    the changelog again from its start (`resume_offset` is None)."""
    spec = declared(tmp_path)
    hosted = followed(tmp_path, spec)
    hosted.keep_changelog_topic_ids(TopicIds("id"))
    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    _fail_the_next_commit(monkeypatch)
    unit = ([encoded(spec, "b", 2)], 2, Position.from_map({"in": {0: 2}}), 4)
    with pytest.raises(OSError, match="No space"):
        hosted.apply_changelog(*unit)
    init = StoreChain.init

    def unclean_once(self: StoreChain[Any], context: StateStoreContext) -> None:
        monkeypatch.setattr(StoreChain, "init", init)
        raise UncleanShutdownError("not closed cleanly, and commits are not atomic")

    monkeypatch.setattr(StoreChain, "init", unclean_once)
    with pytest.raises(UncleanShutdownError):
        hosted.apply_changelog(*unit)
    assert hosted.rebuilt and hosted.resume_offset() is None and hosted.fence is None
    assert len(moved_aside(tmp_path)) == 1, "the files are kept, set aside"
    assert hosted.role.state == "RESTORING" and value(hosted, "a") is None
    assert hosted.changelog_topic_ids == TopicIds("id"), "the same changelog"
    hosted.apply_changelog([encoded(spec, "a", 1)], 1, Position.from_map({"in": {0: 1}}), 2)
    hosted.apply_changelog(*unit)  # read again from the start
    assert value(hosted, "a") == 1 and value(hosted, "b") == 2
    hosted.close()
