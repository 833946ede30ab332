"""Change subscriptions over HTTP (SPEC 12, issue 28): `GET /v1/stores/{store}/changes` as
Server-Sent Events, the service in the pipeline's process (embedded mode).

(a) freshness: a `RemoteQueryClient.subscribe` of the whole store, in another process,
    over loopback SSE, follows a paced pipeline; the time from a batch's commit starting
    to the client yielding the partition's batch (CLOCK_MONOTONIC, shared by the
    processes), p50 and p99 over every event;
(b) N concurrent SSE subscribers of the whole store on one instance (asyncio streams in
    another process): events received per second while the pipeline commits unpaced, the
    instance's CPU (pipeline and service: this process) and RSS.

Distributed mode (the client on one instance, the partitions' hosts elsewhere) is not
measured here: bench/cluster_freshness.py measures a replica's freshness on the broker.

    python bench/subscriptions_http.py [--batches 300] [--rate 50] [--subscribers 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse
from iqstate_http import RemoteQueryClient, start_background
from subscriptions import PARTITIONS, application, commit, cpu_seconds, percentile, rss_mib

from iqstate import Application


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def committed_at(app: Application, number: int, entries: int) -> float:
    """Commit batch `number`; when its commit started, on the clock the readers share."""
    started = now()
    commit(app, number, entries)  # its perf_counter is this process's; this is monotonic
    return started


# -- the readers (child processes) ------------------------------------------------------------


def read_freshness(url: str, expected: int) -> None:
    """Follow the store; print `ready` after the snapshots, then `[n, received]` pairs."""
    snapshots, received = 0, []
    with RemoteQueryClient(url) as client:
        for batch in client.subscribe("s", max_pending=100_000):
            if batch.snapshot:
                snapshots += 1
                if snapshots == PARTITIONS:
                    print("ready", flush=True)
                continue
            received.append((batch.changes[0].value["n"], now()))
            if len(received) == expected:
                break
    print(json.dumps(received), flush=True)


async def read_many(url: str, subscribers: int, per_subscriber: int) -> None:
    """`subscribers` streams of the store; `ready` once each has its snapshots, then when
    the last received its last event and the events counted."""
    limits = httpx.Limits(max_connections=None)
    ready = asyncio.Event()
    snapshotted = 0
    path = "/v1/stores/s/changes?max_pending=100000"

    async def one(http: httpx.AsyncClient) -> int:
        nonlocal snapshotted
        events = seen = 0
        async with aconnect_sse(http, "GET", path) as source:
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                seen += 1
                if seen == PARTITIONS:
                    snapshotted += 1
                    if snapshotted == subscribers:
                        ready.set()
                elif seen > PARTITIONS:
                    events += 1
                    if events == per_subscriber:
                        break
        return events

    timeout = httpx.Timeout(30, read=120)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
        tasks = [asyncio.create_task(one(http)) for _ in range(subscribers)]
        await ready.wait()
        print("ready", flush=True)
        counts = await asyncio.gather(*tasks)
    print(json.dumps({"events": sum(counts), "done": now()}), flush=True)


def reader(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *arguments], stdout=subprocess.PIPE, text=True
    )


def wait_ready(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"the reader did not get ready: {line!r}")


def result(child: subprocess.Popen[str]) -> object:
    out, _ = child.communicate(timeout=600)
    return json.loads(out.strip().splitlines()[-1])


# -- the measurements (this process: pipeline and service) ------------------------------------


def freshness(root: Path, engine: str, batches: int, rate: float, entries: int) -> None:
    app = application(root / "freshness", engine)
    server = start_background(app)
    try:
        child = reader("--read-freshness", server.url, str(batches * PARTITIONS))
        wait_ready(child)
        started = {}
        due = now()
        for number in range(batches):
            due += 1 / rate
            started[number] = committed_at(app, number, entries)
            time.sleep(max(0.0, due - now()))
        received = result(child)
    finally:
        server.stop()
        app.close()
    assert isinstance(received, list)
    delays = [(at - started[number]) * 1e3 for number, at in received]
    print(
        f"(a) embedded, freshness over loopback SSE (RemoteQueryClient.subscribe in another "
        f"process), commit start -> batch yielded: p50 {percentile(delays, 0.5):.2f} ms, "
        f"p99 {percentile(delays, 0.99):.2f} ms ({len(delays)} events; {batches} batches at "
        f"{rate:g}/s, {entries} entries each, {PARTITIONS} partitions)"
    )


def many(root: Path, engine: str, subscribers: int, batches: int, entries: int) -> None:
    app = application(root / "many", engine)
    server = start_background(app)
    try:
        rss_before = rss_mib()
        child = reader("--read-many", server.url, str(subscribers), str(batches * PARTITIONS))
        wait_ready(child)
        rss_connected = rss_mib()
        cpu_before, begun = cpu_seconds(), now()
        for number in range(batches):
            commit(app, number, entries)
        committed = now()
        got = result(child)
        assert isinstance(got, dict)
        elapsed = got["done"] - begun
        cpu = cpu_seconds() - cpu_before  # to the reader's end: it may finish after the commits
        rss_after = rss_mib()
    finally:
        server.stop()
        app.close()
    events = got["events"]
    print(
        f"(b) {subscribers} SSE subscribers on one instance: {events:,} events in "
        f"{elapsed:.2f} s = {events / elapsed:,.0f} events/s (pipeline unpaced: {batches} "
        f"batches in {committed - begun:.2f} s); instance CPU {cpu:.2f} s "
        f"({cpu / elapsed:.0%} of a core); instance RSS {rss_after:.0f} MiB (before the "
        f"subscribers {rss_before:.0f}, connected {rss_connected:.0f})"
    )


def main() -> None:
    if sys.argv[1:2] == ["--read-freshness"]:
        read_freshness(sys.argv[2], int(sys.argv[3]))
        return
    if sys.argv[1:2] == ["--read-many"]:
        asyncio.run(read_many(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="memory")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0, help="batches/s for (a)")
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--many-batches", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        freshness(Path(root), args.engine, args.batches, args.rate, args.entries)
        many(Path(root), args.engine, args.subscribers, args.many_batches, args.entries)


if __name__ == "__main__":
    main()
