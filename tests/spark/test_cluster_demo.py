"""`iqstate demo --cluster` as a user runs it, against the session's broker: batches with
each instance's freshness and counts read through a different instance each time, the
instances' HTTP API answering while it runs, exactly the batches asked for, and a quiet stop
on SIGTERM to its whole process group (as `timeout` and systemd send it) that leaves no
process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from iqstate_http import RemoteQueryClient
from iqstate_kafka import LocalBroker
from test_demo import noise

from iqstate import KeyQuery, StateQueryRequest

LINE = (
    r"batch +\d+ \| +\d+ counts written \| produced +[\d,]+ \| "
    r"i0 (lag [\d?]+ \(\d+ replicas\)|down) \| i1 "
)
VIA = r"   via i[012]: spark=(\d+|\?|\(\w+\)), kafka="


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (zombies, which hold nothing, aside)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(pid)
    return running


def demo_command(broker: LocalBroker, directory: Path, *options: str) -> list[str]:
    """`iqstate demo --cluster` on `broker`, in `directory`, on free ports, with `options`."""
    return [
        sys.executable, "-m", "iqstate.cli", "demo", "--cluster", "--dir", str(directory),
        "--bootstrap-servers", broker.bootstrap_servers, "--http-port", "0", *options,
    ]  # fmt: skip


def test_cluster_demo_runs_and_stops_quietly_on_sigterm_to_its_group(
    kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    import re

    stderr = tmp_path / "stderr"
    command = demo_command(kafka_broker, tmp_path, "--rate", "100")
    started: set[int] = set()
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True
        )
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while sum(1 for line in list(lines) if line.startswith("batch ")) < 2:
            assert process.poll() is None, "".join(lines) + stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "no two batches within 240 s: " + "".join(lines)
            started |= descendants(process.pid)
            time.sleep(0.5)
        started |= descendants(process.pid)
        urls = [line.split()[2] for line in lines if line.startswith("instance ")]
        assert len(urls) == 3
        with RemoteQueryClient(urls[0].rstrip("/")) as client:
            request = StateQueryRequest.in_store("word-counts").with_query(
                KeyQuery.with_key("spark")
            )
            answer = client.query(request).only_partition_result()
        assert answer is not None and not answer.is_failure, answer
        assert isinstance(answer.result, int) and answer.result > 0
        os.killpg(process.pid, signal.SIGTERM)  # as timeout(1) and systemd stop a service
        assert process.wait(180) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    reader.join(10)
    batches = [line for line in lines if line.startswith("batch ")]
    assert all(re.match(LINE, line) for line in batches), batches
    assert lines[-1].startswith("done: "), lines[-3:]
    assert noise(stderr) == [], "no Java or Python traces on a normal stop"
    assert any(re.match(VIA, line) for line in lines), lines
    assert len(started) >= 5  # the worker, three instances, Spark's JVM and executors
    assert alive(started) == set(), "every process the demo started has ended"
    for url in urls:
        try:
            httpx.get(url, timeout=1)
        except httpx.HTTPError:
            continue
        raise AssertionError(f"{url} still answers after the demo stopped")


def test_cluster_demo_runs_exactly_the_batches_asked_for(
    kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    stderr = tmp_path / "stderr"
    command = demo_command(kafka_broker, tmp_path, "--batches", "3", "--lines", "50", "--seed", "3")
    with stderr.open("w") as errors:
        result = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, timeout=400
        )
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + stderr.read_text()[-3000:]
    batches = [line for line in lines if line.startswith("batch ")]
    assert len(batches) == 3, lines
    assert lines[-1].startswith("done: 3 word-count batches, "), lines[-1]
    assert noise(stderr) == []
