"""A changelog reader that stops fetching is replaced: librdkafka's consumer of assigned
partitions can stay stuck after a broker restart while every other client carries on
(confluentinc/librdkafka#5153; seen with the members topic's consumer in CI), and not
something a test can cause at will. Here the readers' consumers stop returning records while
the real broker, writer and watermark requests carry on; the followers notice that their
partitions stay behind the end offsets the broker gives, replace their readers, and the
replicas catch up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message
from iqstate_kafka import KafkaCluster
from iqstate_kafka import follower as follower_module
from iqstate_kafka import reader as reader_module
from replica_support import key_in, reached, two_instances, value_at

from iqstate import Position

STALL_AFTER = 2.0


def test_a_reader_that_stops_fetching_is_replaced_and_the_replicas_catch_up(
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    made: list[Consumer] = []
    stalled: set[int] = set()

    class StallingConsumer(Consumer):
        """The reader's consumer, returning nothing once stalled, as a stuck one does."""

        def __init__(self, config: dict[str, object]) -> None:
            super().__init__(config)
            made.append(self)

        def poll(self, timeout: float = -1) -> Message | None:
            if id(self) in stalled:
                time.sleep(timeout)
                return None
            return super().poll(timeout)

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
            if id(self) in stalled:
                time.sleep(timeout)
                return []
            messages: list[Message] = super().consume(num_messages, timeout)
            return messages

    monkeypatch.setattr(reader_module, "Consumer", StallingConsumer)
    monkeypatch.setattr(follower_module, "STALL_AFTER", STALL_AFTER)
    application_id = unique_name("app")
    with two_instances(cluster, application_id, tmp_path) as (apps, recordings):
        a = apps[0]
        key = key_in(a, "counts", 0)
        before = Position.from_map({"events": {0: 1}})
        with a.begin_batch(position=before, batch_id=1) as batch:
            batch.put("counts", key, 1)
        for app in apps:  # one holds the active of the key's partition, the other a standby
            assert reached(lambda app=app: value_at(app, key, before), str(app.host_info)) == 1

        stalled.update(id(consumer) for consumer in made)  # every reader so far stops
        stalled_at = time.monotonic()
        after = Position.from_map({"events": {0: 2}})
        with caplog.at_level(logging.WARNING, logger="iqstate_kafka.follower"):
            with a.begin_batch(position=after, batch_id=2) as batch:
                batch.put("counts", key, 2)
            for app in apps:
                where = f"{app.host_info} after its reader was replaced"
                assert reached(lambda app=app: value_at(app, key, after), where, 60.0) == 2
        caught_up_after = time.monotonic() - stalled_at
        replaced = [r for r in caplog.records if "it is stuck; replacing it" in r.message]
        assert replaced, caplog.text
        assert f"the broker says {application_id}-" in replaced[0].message
        # Not before the reader was behind for STALL_AFTER seconds of broker answers.
        assert caught_up_after >= STALL_AFTER, caught_up_after
        assert [recording.follower.applied_records for recording in recordings] == [2, 2]
