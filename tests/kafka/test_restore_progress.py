"""`iqstate serve` shows a restore as it happens: a progress bar per store on a terminal,
log lines otherwise, and the replicas' lag gauges in `/metrics` falling to 0; against a
real broker, the instances in processes of their own."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from iqstate_kafka import KafkaCluster
from prometheus_client.parser import text_string_to_metric_families
from support.network import free_port

from iqstate import Application

RECORDS = 300_000
PARTITIONS = 4
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def serve_command(bootstrap: str, app_id: str, state: Path, *extra: str) -> list[str]:
    port = free_port()
    return [
        sys.executable, "-m", "iqstate.cli", "serve", "--cluster", bootstrap,
        "--app-id", app_id, "--application-server", f"127.0.0.1:{port}",
        "--state-dir", str(state), "--standbys", "1",
        "--store", f"counts:key_value:{PARTITIONS},engine=rocksdb,value_serde=int64", *extra,
    ]  # fmt: skip


def reader_workers(pid: int) -> list[int]:
    """The changelog reader processes (`--reader-processes`) process `pid` started."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # not a process, or one that ended meanwhile
        if parent == pid and b"iqstate_kafka.reader_processes" in command:
            found.append(int(entry.name))
    return found


def replica_lags(url: str) -> list[float]:
    """The `iqstate_replica_lag_offsets` samples of `url`'s `/metrics` (none while down)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return []
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "iqstate_replica_lag_offsets"
    ]


def test_a_restore_shows_its_progress(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("restore")
    bootstrap = kafka_broker.bootstrap_servers
    writer = Application(app_id, tmp_path / "writer", cluster=KafkaCluster(bootstrap),
                         serving=False)  # fmt: skip
    writer.key_value_store("counts", PARTITIONS, engine="rocksdb", value_serde="int64")
    with writer:
        for batch_id, start in enumerate(range(0, RECORDS, 50_000)):
            with writer.begin_batch(position={"src": {0: start}}, batch_id=batch_id) as batch:
                batch.put_all("counts", ((f"key-{n:08d}", n) for n in range(start, start + 50_000)))

    # On a terminal: a bar per store, with its rate, redrawn in place.
    primary, secondary = pty.openpty()
    on_terminal = subprocess.Popen(
        serve_command(bootstrap, app_id, tmp_path / "a"),
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary,
        env={**os.environ, "COLUMNS": "140", "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(secondary)
    shown = b""
    try:
        deadline = time.monotonic() + 120
        while b"records/s" not in shown:
            assert time.monotonic() < deadline, ANSI.sub("", shown.decode(errors="replace"))
            assert on_terminal.poll() is None, shown.decode(errors="replace")
            if select.select([primary], [], [], 0.2)[0]:
                shown += os.read(primary, 65536)
        text = ANSI.sub("", shown.decode(errors="replace"))
        assert "restoring counts" in text
        assert re.search(r"\d+/\d+", text), "records done of records to restore"

        # Elsewhere (a log file): log lines, as JSON here; the second instance restores the
        # standbys it is given from the whole changelog, reading it in a worker process.
        # Its /metrics, scraped all along, show the replicas' lag falling to 0.
        log = tmp_path / "b.log"
        command = serve_command(bootstrap, app_id, tmp_path / "b", "--log-format", "json",
                                "--log-level", "info", "--reader-processes", "1")  # fmt: skip
        url = "http://" + command[command.index("--application-server") + 1]
        with log.open("wb") as output:
            logged = subprocess.Popen(command, stdout=output, stderr=output)
        lags_seen: list[float] = [0.0]
        try:
            deadline = time.monotonic() + 120
            while True:
                lags_seen.extend(replica_lags(url))
                lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
                messages = [entry["message"] for entry in lines]
                if any(message.startswith("restored counts") for message in messages):
                    break
                assert logged.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, messages
                time.sleep(0.1)
            assert max(lags_seen) >= 1_000, "the lag gauges showed the replicas behind"
            settled = time.monotonic() + 30
            while any(replica_lags(url)):
                assert time.monotonic() < settled, replica_lags(url)
                time.sleep(0.2)
            assert len(replica_lags(url)) == PARTITIONS, "a gauge per replica, caught up"
            started = next(m for m in messages if m.startswith("restoring counts:"))
            assert int(started.split(": ")[1].split()[0]) >= 1_000
            finished = next(m for m in messages if m.startswith("restored counts"))
            restored = int(finished.split(": ")[1].split()[0])
            assert 1_000 <= restored <= RECORDS + PARTITIONS * 6  # records and the markers
            assert len(reader_workers(logged.pid)) == 1, "it read in one worker process"
        finally:
            logged.send_signal(signal.SIGTERM)
            logged.wait(timeout=60)
    finally:
        on_terminal.send_signal(signal.SIGTERM)
        on_terminal.wait(timeout=60)
        os.close(primary)
