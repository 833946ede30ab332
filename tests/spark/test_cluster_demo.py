"""`iqstate demo --cluster` as a user runs it, against the session's broker: batches with
each instance's freshness, the instances' HTTP API answering while it runs, and a quiet
Ctrl-C that stops everything it started."""

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

LINE = r"batch +\d+ \| +\d+ counts written \| produced +[\d,]+ \| i0 (lag \d+/\d+|down) \| i1 "


def test_cluster_demo_runs_and_stops_quietly(kafka_broker: LocalBroker, tmp_path: Path) -> None:
    import re

    stderr = tmp_path / "stderr"
    command = [
        sys.executable, "-m", "iqstate.cli", "demo", "--cluster", "--dir", str(tmp_path),
        "--bootstrap-servers", kafka_broker.bootstrap_servers, "--http-port", "0",
        "--rate", "100",
    ]  # fmt: skip
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
            time.sleep(0.5)
        urls = [line.split()[2] for line in lines if line.startswith("instance ")]
        assert len(urls) == 3
        with RemoteQueryClient(urls[0].rstrip("/")) as client:
            request = StateQueryRequest.in_store("word-counts").with_query(
                KeyQuery.with_key("spark")
            )
            answer = client.query(request).only_partition_result()
        assert answer is not None and not answer.is_failure, answer
        assert isinstance(answer.result, int) and answer.result > 0
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal
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
    for url in urls:
        try:
            httpx.get(url, timeout=1)
        except httpx.HTTPError:
            continue
        raise AssertionError(f"{url} still answers after the demo stopped")
