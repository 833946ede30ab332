"""Failover with one standby, both sides: two instances, SIGKILL the active of a key, time
until the survivor answers that key as its active.

Each side starts two instances in their own processes with fresh state directories over the
changelog both restored in the bench rounds, waits until the key's partition has an active
on one and a caught-up standby (lag 0) on the other and the active answers the key, then
SIGKILLs the active's process and asks the survivor for the key with `require_active`
(Kafka: `StateQueryRequest.requireActive()`, in the survivor's JVM, every millisecond;
iqstate: `POST /v1/query` with `"require_active": true, "scope": "local"` to the survivor,
every millisecond) until it is answered. The time is the driver's, from just after the kill
to the answer, and counts the failed asks meanwhile.

* Kafka Streams: `num.standby.replicas=1`, classic group protocol (its default), at its
  defaults (consumer `session.timeout.ms` 45 s) or with `session.timeout.ms` given (6 s, the
  broker's `group.min.session.timeout.ms`).
* iqstate: `iqstate serve --cluster ... --standbys 1` at its defaults (`liveness_timeout`
  3 s, heartbeats every 0.5 s).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from data import STORE


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 300.0) -> T:
    """What `probe` returns once it is not None (asked every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return found


class StreamsInstance:
    """A Kafka Streams instance (`Harness serve`), driven by one-line commands on stdin."""

    def __init__(self, java: list[str], options: dict[str, str], log: Path) -> None:
        self.server = f"127.0.0.1:{free_port()}"
        arguments = [part for name, value in options.items() for part in (f"--{name}", value)]
        with log.open("ab") as errors:
            self.process = subprocess.Popen(
                [*java, "serve", *arguments, "--application-server", self.server],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        self.ask_line()  # {"started": true}

    def ask_line(self, command: str | None = None) -> dict[str, Any]:
        """Send `command` (if any) and read the JSON line it answers."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Kafka Streams instance {self.server} exited")
        return dict(json.loads(line))

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        """Leave the group and stop (`quit`); SIGKILL if that takes over a minute."""
        if self.process.poll() is not None:
            return
        try:
            assert self.process.stdin is not None
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            self.process.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


def streams_ready(instances: list[StreamsInstance], key: str) -> StreamsInstance | None:
    """The key's active instance once the other holds a caught-up standby of it, else None."""
    statuses = {i.server: i.ask_line(f"status {key}") for i in instances}
    if any(s.get("state") != "RUNNING" or "active" not in s for s in statuses.values()):
        return None
    first = next(iter(statuses.values()))
    active, standbys, partition = first["active"], first["standbys"], str(first["partition"])
    if active not in statuses or len(standbys) != 1 or standbys[0] == active:
        return None
    if any(s.get("lags", {}).get(partition) != 0 for s in statuses.values()):
        return None
    return next(i for i in instances if i.server == active)


def streams_failover(
    java: list[str], options: dict[str, str], root: Path, key: str, partition: int
) -> dict[str, Any]:
    """One Kafka Streams failover: the seconds until the survivor answers, and failed asks."""
    instances = [
        StreamsInstance(java, {**options, "state-dir": str(root / name)}, root / "streams.log")
        for name in ("a", "b")
    ]
    try:
        wait_for(
            "Kafka Streams: an active and a caught-up standby of the key",
            lambda: streams_ready(instances, key),
        )
        time.sleep(3.0)  # as on iqstate's side: let any follow-up rebalance settle
        victim = streams_ready(instances, key)
        if victim is None:
            raise RuntimeError("Kafka Streams' layout changed while settling")
        if not victim.ask_line(f"probe {key} {partition}")["answered"]:
            raise RuntimeError("the key's active does not answer it")
        survivor = next(i for i in instances if i is not victim)
        victim.kill()
        killed = time.perf_counter()
        answer = survivor.ask_line(f"probe {key} {partition}")
        seconds = time.perf_counter() - killed
        if not answer["answered"]:
            raise RuntimeError("the survivor did not answer within 300 s")
        return {"seconds": seconds, "failures": answer["failures"]}
    finally:
        for instance in instances:
            instance.close()


class IqstateInstance:
    """An iqstate serving instance in its own process (`iqstate serve --cluster`)."""

    def __init__(
        self, bootstrap: str, app_id: str, state_dir: Path, partitions: int, log: Path
    ) -> None:
        self.server = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.server}"
        store = f"{STORE}:key_value:{partitions},engine=rocksdb,key_serde=string,value_serde=string"
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
                 "--app-id", app_id, "--application-server", self.server,
                 "--state-dir", str(state_dir), "--standbys", "1", "--store", store],
                stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def get(self, path: str) -> Any:
        """A GET's JSON answer; None while the instance does not answer."""
        try:
            return httpx.get(self.url + path, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return None

    def answers(self, key: str, partition: int) -> bool:
        """This instance answers the key from its local running active."""
        body = {"store": STORE, "query": {"type": "key", "key": key}, "partitions": [partition],
                "require_active": True, "scope": "local"}  # fmt: skip
        try:
            answer = httpx.post(self.url + "/v1/query", json=body, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        entry = answer.get("partitions", {}).get(str(partition), {})
        return bool(entry.get("ok")) and entry.get("value") is not None

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def iqstate_layout(instances: list[IqstateInstance], partition: int) -> dict[str, str]:
    """Role of the partition on each instance, where every lag of both instances is 0."""
    roles: dict[str, str] = {}
    for instance in instances:
        entries = instance.get("/v1/partitions") or []
        lags = (instance.get("/v1/lags") or {}).get(STORE, {})
        if not lags or any(lag.get("lag") != 0 for lag in lags.values()):
            return {}
        for entry in entries:
            if entry.get("partition") == partition:
                roles[instance.server] = entry["role"]
    return roles


def iqstate_ready(
    instances: list[IqstateInstance], key: str, partition: int
) -> IqstateInstance | None:
    """The key's active once the other instance holds a caught-up standby, else None."""
    roles = iqstate_layout(instances, partition)
    if sorted(roles.values()) != ["RUNNING", "STANDBY"]:
        return None
    active = next(i for i in instances if roles.get(i.server) == "RUNNING")
    return active if active.answers(key, partition) else None


def iqstate_failover(
    bootstrap: str, app_id: str, partitions: int, root: Path, key: str, partition: int
) -> dict[str, Any]:
    """One iqstate failover: the seconds until the survivor answers, and failed asks."""
    instances = [
        IqstateInstance(bootstrap, app_id, root / name, partitions, root / "iqstate.log")
        for name in ("a", "b")
    ]
    try:
        wait_for(
            "iqstate: an active and a caught-up standby of the key",
            lambda: iqstate_ready(instances, key, partition),
        )
        time.sleep(3.0)  # warm-up handovers settle (several heartbeats)
        victim = iqstate_ready(instances, key, partition)
        if victim is None:
            raise RuntimeError("iqstate's layout changed while settling")
        survivor = next(i for i in instances if i is not victim)
        victim.kill()
        killed = time.perf_counter()
        failures = 0
        while not survivor.answers(key, partition):
            failures += 1
            if time.perf_counter() - killed > 300:
                raise RuntimeError("the survivor did not answer within 300 s")
            time.sleep(0.001)
        return {"seconds": time.perf_counter() - killed, "failures": failures}
    finally:
        for instance in instances:
            instance.close()
