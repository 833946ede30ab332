"""Serving instances on the real broker, in their own processes, and what a test waits for:
every partition with one RUNNING active and one standby, a layout that stopped changing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import start_background
from iqstate_kafka import KafkaCluster
from support.network import free_port

from iqstate import Application


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


class Instance:
    """A serving instance in its own process, started with `iqstate serve --cluster`."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        state_dir: Path,
        store: str,
        log: Path | None = None,
        log_level: str = "warning",
    ) -> None:
        self.port = free_port()
        self.log = log
        self.url = f"http://127.0.0.1:{self.port}"
        self._command = [
            sys.executable, "-m", "iqstate.cli", "serve",
            "--cluster", bootstrap, "--app-id", app_id,
            "--application-server", f"127.0.0.1:{self.port}",
            "--state-dir", str(state_dir), "--standbys", "1", "--store", store,
            "--log-level", log_level,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process; its output goes to `log` (appended) if given."""
        if self.log is None:
            self.process = subprocess.Popen(
                self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            return
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(self._command, stdout=output, stderr=subprocess.STDOUT)

    def output(self) -> str:
        """What the process logged so far (empty without a `log`)."""
        return "" if self.log is None else self.log.read_text(errors="replace")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int | None:
        """SIGTERM it, as systemd stops a service: its exit code (None: it was not running;
        -9: it did not stop within 30 s and was killed)."""
        if self.process is None or self.process.poll() is not None:
            return None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode


def roles(url: str) -> list[dict[str, Any]]:
    """An instance's hosted partitions and their roles; empty while it does not answer."""
    try:
        return list(httpx.get(url + "/v1/partitions", timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return []


def layout(urls: list[str], partitions: int) -> dict[int, dict[str, list[str]]]:
    """Per partition, which instances hold it in which role (RUNNING, RESTORING, STANDBY)."""
    found: dict[int, dict[str, list[str]]] = {p: {} for p in range(partitions)}
    for url in urls:
        for entry in roles(url):
            found[entry["partition"]].setdefault(entry["role"], []).append(url)
    return found


def settled(urls: list[str], partitions: int) -> bool:
    """Every partition has one RUNNING active and one standby on another instance."""
    for holders in layout(urls, partitions).values():
        running, standbys = holders.get("RUNNING", []), holders.get("STANDBY", [])
        if len(running) != 1 or len(standbys) != 1 or running == standbys:
            return False
    return True


def stable(urls: list[str], partitions: int, seconds: float = 3.0) -> bool:
    """Settled, and the same layout throughout `seconds` (several heartbeats)."""
    first = layout(urls, partitions)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not settled(urls, partitions) or layout(urls, partitions) != first:
            return False
        time.sleep(0.2)
    return True


def every_partition_served(urls: list[str], partitions: int) -> bool:
    return all(holders.get("RUNNING") for holders in layout(urls, partitions).values())


@contextmanager
def in_process_instance(
    bootstrap: str, app_id: str, state_dir: Path, partitions: int
) -> Iterator[tuple[Application, str]]:
    """A serving instance in the test process (it also writes the batches): its application
    with a RocksDB key-value store `counts` of int64 values, one standby, and its URL."""
    port = free_port()
    app = Application(
        app_id,
        state_dir,
        application_server=f"127.0.0.1:{port}",
        num_standby_replicas=1,
        cluster=KafkaCluster(bootstrap),
    )
    app.key_value_store("counts", partitions, engine="rocksdb", value_serde="int64")
    app.start()
    server = start_background(app, port=port)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        app.close()


@contextmanager
def three_instances(
    bootstrap: str, app_id: str, root: Path, partitions: int, *, until_stable: bool = False
) -> Iterator[tuple[Application, list[str], list[Instance]]]:
    """Instance A in this process (`in_process_instance`: it writes the batches) and B and C
    as `iqstate serve` processes, one RUNNING active and one standby per partition (and a
    layout that stopped changing, with `until_stable`): A's application, the three URLs
    (A's first) and B and C; all stopped afterwards."""
    store = f"counts:key_value:{partitions},engine=rocksdb,value_serde=int64"
    with in_process_instance(bootstrap, app_id, root / "a", partitions) as (app, url_a):
        others = [Instance(bootstrap, app_id, root / name, store) for name in ("b", "c")]
        urls = [url_a, *(other.url for other in others)]
        try:
            for other in others:
                other.start()
            wait_for("one RUNNING active and one standby per partition",
                     lambda: settled(urls, partitions), timeout=120)  # fmt: skip
            if until_stable:
                wait_for("the layout to stop changing",
                         lambda: stable(urls, partitions), timeout=120)  # fmt: skip
            yield app, urls, others
        finally:
            for other in others:
                other.stop()


def running_everywhere(url: str, partitions: int) -> bool:
    """The instance at `url` is the running active of every partition."""
    return {entry["partition"]: entry["role"] for entry in roles(url)} == dict.fromkeys(
        range(partitions), "RUNNING"
    )


@contextmanager
def serving_pair(
    bootstrap: str, app_id: str, tmp_path: Path, partitions: int, log_level: str = "warning"
) -> Iterator[tuple[list[Instance], Application]]:
    """Two `iqstate serve` instances (RocksDB key-value store `counts` of int64 values, one
    standby, output at `log_level` in `tmp_path/<name>.log`) with a settled, stable layout,
    and a writer (`serving=False`) in this process; all stopped afterwards."""
    store = f"counts:key_value:{partitions},engine=rocksdb,value_serde=int64"
    instances = [
        Instance(bootstrap, app_id, tmp_path / name, store, tmp_path / f"{name}.log", log_level)
        for name in ("b", "c")
    ]
    writer = Application(
        app_id, tmp_path / "writer", cluster=KafkaCluster(bootstrap), serving=False
    )
    writer.key_value_store("counts", partitions, engine="rocksdb", value_serde="int64")
    writer.start()
    try:
        # One after the other, as a deployment rolls out.
        instances[0].start()
        wait_for(
            "the first instance running",
            lambda: running_everywhere(instances[0].url, partitions),
            90,
        )
        instances[1].start()
        urls = [instance.url for instance in instances]
        wait_for("a settled layout", lambda: settled(urls, partitions), 90)
        wait_for("a stable layout", lambda: stable(urls, partitions), 60)
        yield instances, writer
    finally:
        writer.close()
        for instance in instances:
            instance.stop()
