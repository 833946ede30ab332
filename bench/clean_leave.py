"""How long a partition cannot be read from its active when an instance is stopped cleanly.

Three `iqstate serve --cluster` instances (each in its own process, one standby per
partition) on a real broker started by this script, and a writer in this process. One
instance is stopped with SIGTERM while this process asks another instance for a key of
every partition, every 10 ms, without `acceptable_lag` (so only the partition's running
active may answer: the strictest reader). A partition's outage is the time from its first
failed answer to its last one; a round's outage is its worst partition's. Then the stopped
instance is started again and the cluster left to settle before the next round.

Two ways to stop alternate, in the same run:

* `drain`: one SIGTERM. The instance leaves the cluster first and keeps answering while
  the others take its partitions over (`Application.leave`), then stops;
* `at once`: two SIGTERMs 20 ms apart, the second of which stops the server at once, as
  one SIGTERM did before the drain: it stops answering, then leaves the cluster.

Medians over the rounds of each, and their ratio; nothing is asserted on time.

    python bench/clean_leave.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from iqstate_kafka import KafkaCluster, LocalBroker

from iqstate import Application
from iqstate.runtime import partition_for_bytes

PARTITIONS = 6
STORE = f"counts:key_value:{PARTITIONS},engine=rocksdb,value_serde=int64"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


class Instance:
    """An `iqstate serve --cluster` process that can be stopped and started again."""

    def __init__(self, bootstrap: str, app_id: str, state_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._command = [
            sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
            "--app-id", app_id, "--application-server", f"127.0.0.1:{self.port}",
            "--state-dir", str(state_dir), "--standbys", "1", "--store", STORE,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self, signals: int) -> None:
        assert self.process is not None
        for number in range(signals):
            if number:
                time.sleep(0.02)
            os.kill(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=60)


def roles(url: str) -> list[tuple[int, str]]:
    try:
        entries = httpx.get(url + "/v1/partitions", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return []
    return [(entry["partition"], entry["role"]) for entry in entries]


def settled(urls: list[str]) -> bool:
    """Every partition one RUNNING active and one standby, each instance with actives."""
    running: dict[int, int] = {}
    standby: dict[int, int] = {}
    for url in urls:
        mine = roles(url)
        if not any(role == "RUNNING" for _, role in mine):
            return False
        for partition, role in mine:
            counts = running if role == "RUNNING" else standby if role == "STANDBY" else None
            if counts is not None:
                counts[partition] = counts.get(partition, 0) + 1
    every = range(PARTITIONS)
    return all(running.get(p) == 1 and standby.get(p) == 1 for p in every)


def keys_by_partition() -> dict[int, str]:
    """A key of each partition (the string serde's bytes, murmur2 as Kafka places them)."""
    found: dict[int, str] = {}
    number = 0
    while len(found) < PARTITIONS:
        key = f"key-{number}"
        found.setdefault(partition_for_bytes(key.encode(), PARTITIONS), key)
        number += 1
    return found


def outage(reader: str, keys: dict[int, str], stop: Callable[[], None]) -> float:
    """The worst partition's outage while `stop` runs, read from `reader`."""
    failures: dict[int, list[float]] = {p: [] for p in keys}
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=5) as client:
            while not done.is_set():
                for partition, key in keys.items():
                    now = time.monotonic()
                    try:
                        answer = client.get(f"{reader}/v1/stores/counts/keys/{key}")
                        ok = answer.status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    if not ok:
                        failures[partition].append(now)
                time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(0.5)
    stop()
    time.sleep(8)  # well past any handoff at the default settings
    done.set()
    poller.join()
    spans = [times[-1] - times[0] if times else 0.0 for times in failures.values()]
    return max(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, LocalBroker() as broker:
        root = Path(directory)
        bootstrap = broker.bootstrap_servers
        app_id = f"leave-{os.getpid()}"
        instances = [Instance(bootstrap, app_id, root / name) for name in "abc"]
        writer = Application(app_id, root / "writer", cluster=KafkaCluster(bootstrap),
                             serving=False)  # fmt: skip
        writer.key_value_store("counts", PARTITIONS, engine="rocksdb", value_serde="int64")
        keys = keys_by_partition()
        try:
            for instance in instances:
                instance.start()
            writer.start()
            with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
                batch.put_all("counts", [(key, 1) for key in keys.values()])
            urls = [instance.url for instance in instances]
            results: dict[str, list[float]] = {"drain": [], "at once": []}
            for number in range(2 * args.rounds):
                mode = "drain" if number % 2 == 0 else "at once"
                wait("a settled cluster", lambda: settled(urls), 180)
                time.sleep(2)
                stopped, reader = instances[number % 3], instances[(number + 1) % 3]
                signals = 1 if mode == "drain" else 2
                seconds = outage(reader.url, keys, functools.partial(stopped.stop, signals))
                results[mode].append(seconds)
                print(f"round {number + 1} ({mode}): worst partition {seconds:.2f} s", flush=True)
                stopped.start()
            drain, at_once = (statistics.median(results[m]) for m in ("drain", "at once"))
            print(
                f"\nworst partition's outage for a reader without acceptable_lag, median of "
                f"{args.rounds}: drain {drain:.2f} s, at once {at_once:.2f} s, "
                f"ratio {drain / at_once if at_once else float('nan'):.2f}"
            )
        finally:
            writer.close()
            for instance in instances:
                if instance.process is not None and instance.process.poll() is None:
                    instance.process.kill()
                    instance.process.wait()


if __name__ == "__main__":
    main()
