"""The store types of SPEC 6.1 in distributed mode, on the session's real broker: batches
go to the changelogs, replicas follow them; a global store is hosted and answered by every
instance as an active; a versioned store rebuilt from its changelog answers the same
history, sessions and timestamps included."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iqstate_kafka import KafkaCluster
from replica_support import RecordingCluster, eventually

from iqstate import (
    Application,
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    StateQueryRequest,
    TimestampedKeyQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowRangeQuery,
)
from iqstate.runtime import ACTIVE

KEYS = [f"user-{n}" for n in range(6)]
AFTER = Position.from_map({"events": {0: 2}})


def declared(app: Application) -> Application:
    app.versioned_key_value_store("versions", 2, 1_000_000, engine="rocksdb", value_serde="int64")
    app.session_store("sessions", 2, 1_000_000, engine="rocksdb", value_serde="int64")
    app.timestamped_key_value_store("latest", 2, engine="rocksdb", value_serde="int64")
    app.global_key_value_store("config", engine="rocksdb", value_serde="string")
    return app


def instance(cluster: KafkaCluster, app_id: str, directory: Path, name: str) -> Application:
    return declared(
        Application(
            app_id, directory / name, application_server=f"{name}.test:7000",
            cluster=RecordingCluster(cluster),
        )
    )  # fmt: skip


def write(app: Application) -> None:
    """Two batches: versions in and out of order, a tombstone, sessions, a global value."""
    with app.begin_batch(position={"events": {0: 1}}, batch_id=1) as batch:
        for n, key in enumerate(KEYS):
            batch.put("versions", key, n, timestamp=100)
            batch.put("versions", key, n + 100, timestamp=300)
            batch.put("sessions", key, n, session=(10 * n, 10 * n + 5))
            batch.put("latest", key, n, timestamp=1_000 + n)
        batch.put("config", "mode", "fast")
    with app.begin_batch(position=AFTER, batch_id=2) as batch:
        for n, key in enumerate(KEYS):
            batch.put("versions", key, n + 10, timestamp=200)  # out of order, in between
        batch.delete("versions", KEYS[0], timestamp=400)
        batch.delete("sessions", KEYS[1], session=(10, 15))


def answers(apps: list[Application], store: str, query: Any) -> list[Any]:
    """Every instance's answers of the partitions it hosts, at batch 2's position (a key's
    partition hosted elsewhere answers `NOT_PRESENT` there)."""
    found = []
    for app in apps:
        request = (
            StateQueryRequest.in_store(store)
            .with_query(query)
            .with_position_bound(PositionBound.at(AFTER))
        )
        for result in app.query(request).partition_results.values():
            if result.is_failure and result.failure_reason is FailureReason.NOT_PRESENT:
                continue
            if result.is_failure:
                return [result.failure_reason]
            value = result.result
            if hasattr(value, "__iter__"):
                with value as rows:
                    found.extend(rows)
            elif value is not None:
                found.append(value)
    return sorted(found, key=repr)


def expected_history() -> dict[str, list[Any]]:
    return {
        key: [
            VersionedRecord(n, 100, 200),
            VersionedRecord(n + 10, 200, 300),
            VersionedRecord(n + 100, 300, 400 if n == 0 else None),
        ]
        for n, key in enumerate(KEYS)
    }


def check_everything(apps: list[Application]) -> None:
    history = expected_history()
    for n, key in enumerate(KEYS):
        query = MultiVersionedKeyQuery.with_key(key).with_ascending_timestamps()
        assert answers(apps, "versions", query) == sorted(history[key], key=repr), key
        assert answers(apps, "versions", VersionedKeyQuery.with_key(key).as_of(250)) == [
            VersionedRecord(n + 10, 200, 300)
        ]
        sessions = [] if n == 1 else [(Windowed(key, 10 * n, 10 * n + 5), n)]
        assert answers(apps, "sessions", WindowRangeQuery.with_key(key)) == sessions
        assert answers(apps, "latest", TimestampedKeyQuery.with_key(key)) == [
            ValueAndTimestamp(n, 1_000 + n)
        ]
    in_range = answers(apps, "versions", VersionedRangeQuery.with_no_bounds().as_of(450))
    assert in_range == sorted(
        ((key, VersionedRecord(n + 100, 300, None)) for n, key in enumerate(KEYS) if n),
        key=repr,
    ), "the tombstone at 400 hides user-0"


def check_everything_once_settled(apps: list[Application], within: float = 60.0) -> None:
    """`check_everything`, retried while the layout settles: a partition that moves between
    the instances (a warmed-up replica taking its active over) answers `NOT_PRESENT` for
    that moment, as a user would see and retry."""
    deadline = time.monotonic() + within
    while True:
        try:
            check_everything(apps)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def caught_up(apps: list[Application]) -> Callable[[], bool]:
    def check() -> bool:
        for app in apps:
            positions = [p for store, _, _, p in app.local_partitions() if store != "config"]
            global_roles = app.roles().get("config", {})
            if global_roles != {0: ACTIVE} or any(p != AFTER for p in positions):
                return False
        return True

    return check


def test_global_store_is_answered_by_every_instance_and_history_survives_a_rebuild(
    cluster: KafkaCluster, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    app_id = unique_name("types")
    apps = [instance(cluster, app_id, tmp_path, name) for name in ("a", "b")]
    try:
        for app in apps:
            app.start()
        write(apps[0])
        eventually(caught_up(apps), "both instances caught up, each an active of the global", 120)
        for app in apps:
            request = (
                StateQueryRequest.in_store("config")
                .with_query(KeyQuery.with_key("mode"))
                .require_active()
                .with_position_bound(PositionBound.at(AFTER))
            )
            result = app.query(request).only_partition_result()
            assert result is not None and result.result == "fast", app.host_info
        check_everything_once_settled(apps)
    finally:
        for app in apps:
            app.close()

    shutil.rmtree(tmp_path / "a")  # its replicas are gone: rebuilt from the changelogs
    rebuilt = instance(cluster, app_id, tmp_path, "a")
    with rebuilt:
        eventually(caught_up([rebuilt]), "the rebuilt instance caught up", 120)
        check_everything_once_settled([rebuilt])
