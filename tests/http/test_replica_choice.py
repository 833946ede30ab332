"""`ReplicaChoice` shared by request threads: an invalidation is never lost to a reading of
the cluster that was under way, and orders are never taken from another reading's table."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from iqstate_http.replica_choice import ReplicaChoice

from iqstate import HostInfo
from iqstate.runtime.metadata import Departure, InstanceStatus, ReplicaStatus

THIS_HOST = HostInfo("a", 1)


def cluster(active: str, dead: str | None = None) -> list[InstanceStatus]:
    """Instances b and c hosting partition 0 of store s, `active` its running active."""
    statuses = []
    for host in ("b", "c"):
        state = "RUNNING" if host == active else "STANDBY"
        replicas = {"s": {0: ReplicaStatus(state, 0)}}
        status = InstanceStatus(HostInfo(host, 1), replicas)
        if host == dead:
            status = InstanceStatus(HostInfo(host, 1), {}, Departure("silent", 3.0))
        statuses.append(status)
    return statuses


@dataclass
class ClusterView:
    """What `ReplicaChoice` reads of an application: its address and the cluster's status,
    which a test changes, and can hold a reading in the middle (`hold`)."""

    statuses: list[InstanceStatus]
    host_info: HostInfo = THIS_HOST
    readings: int = 0
    hold: tuple[threading.Event, threading.Event] | None = None

    def cluster_status(self) -> list[InstanceStatus]:
        self.readings += 1
        statuses = self.statuses
        if self.hold is not None and threading.current_thread().name == "held":
            reading, release = self.hold
            reading.set()
            release.wait(10)
        return statuses


def hosts(choice: ReplicaChoice) -> list[str]:
    return [replica.host for replica in choice.candidates("s", 0, None)]


def test_an_invalidation_during_a_reading_is_not_lost() -> None:
    view = ClusterView(cluster(active="b"))
    app: Any = view
    choice = ReplicaChoice(app, max_age=60)
    view.hold = (threading.Event(), threading.Event())
    reader = threading.Thread(target=lambda: choice.replicas("s", 0), name="held")
    reader.start()
    assert view.hold[0].wait(10)  # the reading has taken the old status
    view.statuses = cluster(active="c", dead="b")  # b died, c took over
    choice.invalidate()  # a forward to b failed
    view.hold[1].set()
    reader.join(10)
    assert hosts(choice) == ["c:1"], "the reading under way when b failed is not believed"


def test_orders_follow_the_reading_they_come_from() -> None:
    view = ClusterView(cluster(active="b"))
    app: Any = view
    choice = ReplicaChoice(app, max_age=60)
    assert hosts(choice) == ["b:1"]
    readings = view.readings
    assert hosts(choice) == ["b:1"] and view.readings == readings, "cached for max_age"
    view.statuses = cluster(active="c", dead="b")
    choice.invalidate()
    assert hosts(choice) == ["c:1"] and view.readings == readings + 1
