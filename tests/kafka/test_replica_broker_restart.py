"""Replicas outlive a broker restart: while the broker is down, queries are answered from the
local replicas (actives and standbys); once it is back, the followers reconnect and apply what
is written next. Uses a broker of its own, not the session's, so the session's stays up."""

from __future__ import annotations

import time
from pathlib import Path

from iqstate_kafka import KafkaCluster, LocalBroker
from replica_support import KEY_VALUE, eventually, key_in, reached, two_instances, value_at

from iqstate import Position


def test_replicas_serve_through_a_broker_restart_and_catch_up_after_it(tmp_path: Path) -> None:
    with LocalBroker(tmp_path / "broker") as broker:
        cluster = KafkaCluster(
            broker.bootstrap_servers, timeout=2.0, heartbeat_interval=0.2, liveness_timeout=1.0
        )
        with two_instances(cluster, "restart", tmp_path) as (apps, recordings):
            a, b = apps
            key = key_in(a, KEY_VALUE, 0)
            before = Position.from_map({"events": {0: 1}})
            with a.begin_batch(position=before, batch_id=1) as batch:
                batch.put(KEY_VALUE, key, 1)
            for app in apps:  # one holds the active of the key's partition, the other a standby
                assert reached(lambda app=app: value_at(app, key, before), str(app.host_info)) == 1

            broker.stop()
            for _ in range(20):
                for app in apps:
                    assert value_at(app, key, before) == (True, 1), "served while Kafka is down"
                time.sleep(0.1)
            broker.start()

            after = Position.from_map({"events": {0: 2}})
            with b.begin_batch(position=after, batch_id=2) as batch:
                batch.put(KEY_VALUE, key, 2)
            for app in apps:
                where = f"{app.host_info} after the restart"
                assert reached(lambda app=app: value_at(app, key, after), where, 60.0) == 2
                eventually(
                    lambda app=app: all(p == after for *_, p in app.local_partitions()),
                    f"{where}: every partition at batch 2",
                    60.0,
                )
            assert [recording.follower.applied_records for recording in recordings] == [2, 2]
