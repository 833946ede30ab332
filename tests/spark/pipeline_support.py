"""Helpers of the distributed pipeline tests: the Spark driver and serving instances as
processes of their own (killed by PID), the input produced with its ground truth, and what
a user reads back through `RemoteQueryClient`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_http import RemoteQueryClient
from iqstate_spark import cluster_pipeline
from support.network import free_port

from iqstate import (
    FailureReason,
    Position,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    WindowRangeQuery,
)

WORDS = ["spark", "kafka", "state", "query", "replica", "standby", "window", "batch", "fence"]
MINUTE = cluster_pipeline.WINDOW_MS


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = 120.0,
    why_not: Callable[[], str] = lambda: "",
) -> Any:
    """What `check` returns once it is truthy; after `timeout`, a failure naming `what`, and
    what `why_not` says of the last check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{why_not()}")


def _kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL `process` and what it started (its own session, so its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@dataclass
class Input:
    """The input topic and the ground truth of everything produced into it."""

    bootstrap: str
    topic: str
    partitions: int = 2
    counts: Counter[str] = field(default_factory=Counter)
    windows: Counter[tuple[str, int]] = field(default_factory=Counter)
    ends: dict[int, int] = field(default_factory=dict)
    produced: int = 0

    def create(self) -> Input:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(self.topic, self.partitions, 1)])[self.topic].result(30)
        return self

    def produce(self, count: int) -> None:
        """`count` more events: a word, its event time (the record timestamp) a few minutes
        back so they span several one-minute windows."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        base = (int(time.time() * 1000) // MINUTE - 5) * MINUTE
        failures: list[object] = []
        for _ in range(count):
            n = self.produced
            word = WORDS[(n * 7 + n // 3) % len(WORDS)]
            timestamp = base + (n * 977) % (4 * MINUTE)
            producer.produce(
                self.topic, word.encode(), partition=n % self.partitions, timestamp=timestamp,
                on_delivery=lambda error, _m: failures.append(error) if error else None,
            )  # fmt: skip
            self.counts[word] += 1
            self.windows[(word, timestamp // MINUTE * MINUTE)] += 1
            self.ends[n % self.partitions] = self.ends.get(n % self.partitions, 0) + 1
            self.produced += 1
        assert producer.flush(30) == 0 and not failures, failures

    def position(self) -> Position:
        """What every store partition's position is once all input is consumed."""
        return Position.from_map({self.topic: dict(self.ends)})


class Driver:
    """The pipeline's Spark driver (`python -m iqstate_spark.cluster_pipeline`) with its
    executors (`local-cluster`), in a session of its own; its batch lines are collected."""

    def __init__(self, bootstrap: str, app_id: str, topic: str, checkpoints: Path) -> None:
        self.name = "driver"
        self.command = [
            sys.executable, "-m", "iqstate_spark.cluster_pipeline",
            "--bootstrap-servers", bootstrap, "--app-id", app_id, "--input-topic", topic,
            "--checkpoints", str(checkpoints), "--max-offsets-per-trigger", "150",
        ]  # fmt: skip
        self.log = checkpoints.parent / "driver.log"
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def start(self) -> Driver:
        self.lines = []
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True,
            )  # fmt: skip
        threading.Thread(target=self._collect, args=(self.process,), daemon=True).start()
        return self

    def _collect(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.strip())

    def batches(self, store: str) -> list[tuple[int, int]]:
        """`(batch id, records)` of each batch of `store` written since the last start."""
        found = []
        for line in list(self.lines):
            parts = line.split()
            if parts[:2] == ["batch", store]:
                found.append((int(parts[2]), int(parts[3])))
        return found

    def executor_pids(self) -> list[int]:
        """PIDs of the executor JVMs under the driver (Spark's CoarseGrainedExecutorBackend)."""
        assert self.process is not None
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
                group = os.getpgid(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
            if b"CoarseGrainedExecutorBackend" in command and group == self.process.pid:
                pids.append(int(entry.name))
        return pids

    def kill(self) -> None:
        assert self.process is not None
        _kill_group(self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=60)
            _kill_group(self.process)  # executors the driver left behind, if any

    def failure(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-30:]) if self.log.exists() else ""


class Instance:
    """A serving instance (`iqstate serve --cluster`) with one standby per partition, logging
    at `info` (its assignment changes too) to `<state_dir>.log`."""

    def __init__(self, bootstrap: str, app_id: str, state_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = f"instance {self.url}"
        self.command = [
            sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
            "--app-id", app_id, "--application-server", f"127.0.0.1:{self.port}",
            "--state-dir", str(state_dir), "--standbys", "1", "--log-level", "info",
        ]  # fmt: skip
        for option in cluster_pipeline.serve_store_options():
            self.command += ["--store", option]
        self.process: subprocess.Popen[bytes] | None = None
        self.log = state_dir.parent / f"{state_dir.name}.log"

    def start(self) -> Instance:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def failure(self) -> str:
        """What it says of itself now (health and each replica's role), then its last lines."""
        found = []
        for path in ("/v1/health", "/v1/partitions"):
            try:
                found.append(f"{path}: {httpx.get(self.url + path, timeout=5).text}")
            except httpx.HTTPError as exc:
                found.append(f"{path}: {exc!r}")
        lines = self.log.read_text().splitlines()[-30:] if self.log.exists() else []
        return "\n".join([*found, *lines])

    def kill(self) -> None:
        assert self.process is not None
        _kill_group(self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(self.process)


ALLOWED_FAILURES = (
    FailureReason.NOT_PRESENT,
    FailureReason.NOT_ACTIVE,
    FailureReason.NOT_UP_TO_BOUND,
)


@dataclass
class Snapshot:
    """What a user reads of both stores: merged contents, each partition's position, and
    which partitions failed (and why)."""

    counts: dict[str, int]
    windows: dict[tuple[str, int], int]
    positions: dict[tuple[str, int], Position]
    failed: dict[tuple[str, int], FailureReason]


def read_all(client: RemoteQueryClient) -> Snapshot:
    """Both stores, every partition, through the routing client: answered or failed per
    partition (only the failures a cluster in motion gives), never an exception."""
    snapshot = Snapshot({}, {}, {}, {})
    requests: list[tuple[str, Any]] = [
        (cluster_pipeline.COUNTS, RangeQuery.with_no_bounds()),
        (cluster_pipeline.WINDOWS, WindowRangeQuery.with_window_start_range(0, 2**62)),
    ]
    for store, query in requests:
        result: StateQueryResult[Any] = client.query(
            StateQueryRequest.in_store(store).with_query(query)
        )
        for partition, answer in result.partition_results.items():
            if answer.is_failure:
                assert answer.failure_reason in ALLOWED_FAILURES, (store, partition, answer)
                snapshot.failed[(store, partition)] = answer.failure_reason
                continue
            snapshot.positions[(store, partition)] = answer.position
            with answer.result as pairs:
                for key, value in pairs:
                    if store == cluster_pipeline.COUNTS:
                        snapshot.counts[key] = value
                    else:
                        snapshot.windows[(key.key, key.start_ms)] = value
    return snapshot


def converged(client: RemoteQueryClient, truth: Input) -> Snapshot | None:
    """The snapshot once every partition answers with the ground truth at the input's end."""
    snapshot = read_all(client)
    return snapshot if not gaps(snapshot, truth) else None


def gaps(snapshot: Snapshot, truth: Input) -> list[str]:
    """What `snapshot` still lacks of the ground truth at the input's end (nothing: converged)."""
    found = []
    partitions = cluster_pipeline.COUNTS_PARTITIONS + cluster_pipeline.WINDOWS_PARTITIONS
    if snapshot.failed:
        found.append(f"failed partitions {snapshot.failed}")
    if len(snapshot.positions) + len(snapshot.failed) != partitions:
        found.append(f"{len(snapshot.positions)} partitions answered of {partitions}")
    if snapshot.counts != dict(truth.counts):
        found.append(f"counts total {sum(snapshot.counts.values())} of {truth.produced}")
    if snapshot.windows != dict(truth.windows):
        found.append(f"windows total {sum(snapshot.windows.values())} of {truth.produced}")
    behind = {
        where: position.to_map()
        for where, position in snapshot.positions.items()
        if position != truth.position()
    }
    if behind:
        found.append(f"positions {behind} where the input ends at {truth.position().to_map()}")
    return found


def wait_converged(
    client: RemoteQueryClient,
    truth: Input,
    what: str,
    timeout: float,
    processes: Sequence[Driver | Instance] = (),
) -> Snapshot:
    """`converged`'s snapshot; after `timeout`, a failure saying what was still missing, with
    the last log lines of `processes`."""
    missing: list[str] = []

    def check() -> Snapshot | None:
        snapshot = read_all(client)
        missing[:] = gaps(snapshot, truth)
        return None if missing else snapshot

    def why_not() -> str:
        logs = (f"\n--- {process.name}'s log:\n{process.failure()}" for process in processes)
        return f": {'; '.join(missing)}" + "".join(logs)

    snapshot: Snapshot = wait_for(what, check, timeout, why_not)
    return snapshot


@contextmanager
def running_pipeline(
    bootstrap: str, app_id: str, topic: str, directory: Path, instances: int = 3
) -> Iterator[tuple[Input, Driver, list[Instance]]]:
    """An input topic, serving instances (started) and the pipeline's driver (not yet
    started), all stopped after."""
    source = Input(bootstrap, topic).create()
    serving = [Instance(bootstrap, app_id, directory / f"instance-{i}") for i in range(instances)]
    driver = Driver(bootstrap, app_id, source.topic, directory / "checkpoints")
    try:
        for instance in serving:
            instance.start()
        yield source, driver, serving
    finally:
        driver.stop()
        for instance in serving:
            instance.stop()
