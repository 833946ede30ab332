"""When a remote subscription gives up (`RemoteSubscriptionLogic`, which does no I/O), on
a clock of its own: after `reconnect_timeout` unserved, whatever the failovers between."""

from __future__ import annotations

import pytest
from iqstate_http import client_subscribe
from iqstate_http.client_subscribe import RETRY_INTERVAL, RemoteSubscriptionLogic

from iqstate import SubscriptionEndedError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class AnyInstance:
    """The plan's part the logic calls on a break (which instance to try next)."""

    def moved(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    ticking = Clock()
    monkeypatch.setattr(client_subscribe.time, "monotonic", ticking)
    return ticking


def subscription(timeout: float) -> RemoteSubscriptionLogic:
    return RemoteSubscriptionLogic(
        AnyInstance(),  # type: ignore[arg-type]
        "counts", {}, None, None, None, None, timeout,
    )  # fmt: skip


def test_a_quiet_subscription_rides_out_failovers_at_any_spacing(clock: Clock) -> None:
    """A rolling restart moves a subscription whose key never changes every 40 s, more
    often than its 60 s timeout: each stream served it, so none of the breaks ends it."""
    logic = subscription(60.0)
    for _ in range(10):
        logic.opened()
        clock.now += 40.0
        assert logic.broke("the instance closed the stream") == RETRY_INTERVAL
        clock.now += RETRY_INTERVAL


def test_instances_that_find_no_replica_end_it_after_the_timeout(clock: Clock) -> None:
    """Each instance holds the stream open while it looks for a replica (30 s), then ends
    it saying it found none: that time was not served, however long the stream was open."""
    logic = subscription(10.0)
    logic.opened()
    clock.now += 31.0
    with pytest.raises(
        SubscriptionEndedError, match="no instance served the subscription for 10 s"
    ):
        logic.broke("partition 0 found no replica to follow it for 30 s", served=False)


def test_time_without_an_open_stream_adds_up_across_refusals(clock: Clock) -> None:
    logic = subscription(2.0)
    logic.opened()
    clock.now += 100.0  # served for long
    logic.broke("the instance went away")
    for _ in range(4):  # 1.6 s of connection refusals: not yet
        clock.now += 0.4
        logic.broke("connection refused")
    clock.now += 0.5
    with pytest.raises(SubscriptionEndedError):
        logic.broke("connection refused")
