"""Change subscriptions in embedded mode (SPEC 12, issue 28): freshness, many subscribers,
and what subscribers cost the pipeline.

(a) freshness: one subscriber of every key follows a paced pipeline; the time from a
    batch's commit starting (its `with` block ending) to the subscriber receiving the
    partition's event, p50 and p99 over every event;
(b) 1,000 concurrent subscribers on one process (asyncio tasks on one event loop, each
    following the whole store): events delivered per second, CPU seconds and RSS;
(c) the pipeline's commit rate (batches/s, unpaced) without subscribers, with 1,000 that
    read (their decoding shares the process and its GIL), and with 1,000 that are stalled
    (the cost of publishing alone); the ratios against no subscribers. Unpaced, 1,000
    readers in the committer's process take the interpreter from it (the GIL): (c) shows
    that limit, not a pipeline's life;
(d) a paced pipeline (`--paced-rate` batches/s of `--paced-entries` entries, as a
    micro-batch stream commits) for `--paced-seconds`, without subscribers and with 1,000
    reading in-process that keep up: the time each batch takes the pipeline (building and
    committing it), mean and p99, and their ratio: what following the store costs it.

The machine's load averages are printed at the start and the end: on a busy machine a
thread holding the GIL may be off the CPU, and the others wait for it.

    python bench/subscriptions.py [--engine memory] [--batches 300] [--entries 100]
        [--paced-rate 20] [--paced-entries 1000] [--paced-seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path

from iqstate import Application, ChangeBufferSettings, Subscription

PARTITIONS = 4


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def application(root: Path, engine: str) -> Application:
    app = Application("bench-subscriptions", root, change_buffer=ChangeBufferSettings())
    app.key_value_store("s", PARTITIONS, engine=engine)
    app.start()
    return app


def commit(app: Application, number: int, entries: int) -> float:
    """Commit batch `number`; the time its commit started."""
    batch = app.begin_batch({"source": {0: number}}, batch_id=number)
    with batch:
        for entry in range(entries):
            batch.put("s", f"key-{entry}", {"n": number, "entry": entry})
        return time.perf_counter()  # taken before the block's end commits the batch


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def freshness(root: Path, engine: str, batches: int, entries: int) -> None:
    app = application(root / "freshness", engine)
    subscription = app.subscribe("s")
    expected = batches * PARTITIONS
    received: list[tuple[int, float]] = []

    def follow() -> None:
        for batch in subscription:
            if not batch.snapshot:
                received.append((batch.changes[0].value["n"], time.perf_counter()))
                if len(received) == expected:
                    return

    reader = threading.Thread(target=follow)
    reader.start()
    started = []
    for number in range(batches):
        started.append(commit(app, number, entries))
        time.sleep(0.005)  # a paced pipeline: ~200 batches/s at most
    reader.join(timeout=120)
    app.close()
    delays = [(at - started[number]) * 1e3 for number, at in received]
    print(
        f"(a) freshness, commit start -> event received: p50 {percentile(delays, 0.5):.3f} ms, "
        f"p99 {percentile(delays, 0.99):.3f} ms ({len(delays)} events of {expected}; "
        f"{entries} entries per batch, {PARTITIONS} partitions)"
    )


async def drain(subscriptions: list[Subscription], per_subscriber: int) -> int:
    async def one(subscription: Subscription) -> int:
        events = 0
        async for batch in subscription:
            if not batch.snapshot:
                events += 1
                if events == per_subscriber:
                    break
        return events

    return sum(await asyncio.gather(*(one(s) for s in subscriptions)))


def run_pipeline(app: Application, first: int, batches: int, entries: int) -> float:
    """Commit `batches` unpaced; the batches per second."""
    gc.collect()  # each phase from a collected heap: no garbage of the one before
    begun = time.perf_counter()
    for number in range(first, first + batches):
        commit(app, number, entries)
    return batches / (time.perf_counter() - begun)


def many_subscribers(root: Path, engine: str, subscribers: int, batches: int, entries: int) -> None:
    app = application(root / "many", engine)
    baseline = run_pipeline(app, 0, batches, entries)

    stalled = [app.subscribe("s", max_pending=1 << 20) for _ in range(subscribers)]
    for subscription in stalled:
        while subscription.poll() is not None:  # their snapshots; then they stop reading
            pass
    with_stalled = run_pipeline(app, batches, batches, entries)
    for subscription in stalled:
        subscription.close()

    readers = [app.subscribe("s", max_pending=1 << 20) for _ in range(subscribers)]
    for subscription in readers:
        while subscription.poll() is not None:
            pass
    loop = asyncio.new_event_loop()
    per_subscriber = batches * PARTITIONS
    result: list[int] = []
    cpu_before, rss_before = cpu_seconds(), rss_mib()
    consumer = threading.Thread(
        target=lambda: result.append(loop.run_until_complete(drain(readers, per_subscriber)))
    )
    begun = time.perf_counter()
    consumer.start()
    with_readers = run_pipeline(app, 2 * batches, batches, entries)
    consumer.join(timeout=600)
    elapsed = time.perf_counter() - begun
    cpu = cpu_seconds() - cpu_before
    loop.close()
    events = result[0] if result else 0
    print(
        f"(b) {subscribers} subscribers (asyncio, one loop): {events} events in {elapsed:.2f} s "
        f"= {events / elapsed:,.0f} events/s; CPU {cpu:.2f} s ({cpu / elapsed:.0%} of a core); "
        f"RSS {rss_mib():.0f} MiB (before the readers {rss_before:.0f} MiB)"
    )
    print(
        f"(c) commit rate, {entries} entries per batch: no subscribers {baseline:,.0f} batches/s; "
        f"{subscribers} stalled {with_stalled:,.0f} ({with_stalled / baseline:.0%}); "
        f"{subscribers} reading in-process {with_readers:,.0f} ({with_readers / baseline:.0%})"
    )
    app.close()


def paced_batches(
    app: Application, first: int, count: int, rate: float, entries: int
) -> list[float]:
    """Commit `count` batches at `rate` a second; the seconds each took the pipeline."""
    gc.collect()  # each phase from a collected heap: no garbage of the one before
    took = []
    due = time.perf_counter()
    for number in range(first, first + count):
        due += 1 / rate
        begun = time.perf_counter()
        commit(app, number, entries)
        took.append(time.perf_counter() - begun)
        time.sleep(max(0.0, due - time.perf_counter()))
    return took


def paced(
    root: Path, engine: str, subscribers: int, rate: float, entries: int, seconds: float
) -> None:
    app = application(root / "paced", engine)
    count = int(rate * seconds)
    alone = paced_batches(app, 0, count, rate, entries)
    readers = [app.subscribe("s", max_pending=1 << 20) for _ in range(subscribers)]
    for subscription in readers:
        while subscription.poll() is not None:
            pass
    loop = asyncio.new_event_loop()
    result: list[int] = []
    consumer = threading.Thread(
        target=lambda: result.append(loop.run_until_complete(drain(readers, count * PARTITIONS)))
    )
    consumer.start()
    followed = paced_batches(app, count, count, rate, entries)
    consumer.join(timeout=600)
    loop.close()
    app.close()
    events = result[0] if result else 0
    mean_alone, mean_followed = statistics.fmean(alone), statistics.fmean(followed)
    print(
        f"(d) paced pipeline, {rate:g} batches/s of {entries} entries for {seconds:g} s: a batch "
        f"takes it {mean_alone * 1e3:.2f} ms (p99 {percentile(alone, 0.99) * 1e3:.2f}) alone, "
        f"{mean_followed * 1e3:.2f} ms (p99 {percentile(followed, 0.99) * 1e3:.2f}) with "
        f"{subscribers} subscribers reading in-process: {mean_followed / mean_alone - 1:+.0%}; "
        f"they received {events:,} events of {count * PARTITIONS * subscribers:,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="memory")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--paced-rate", type=float, default=20)
    parser.add_argument("--paced-entries", type=int, default=1000)
    parser.add_argument("--paced-seconds", type=float, default=10)
    options = parser.parse_args()
    print(f"load average {load_average()} at the start")
    with tempfile.TemporaryDirectory(prefix="iqstate-bench-subscriptions-") as root:
        freshness(Path(root), options.engine, options.batches, options.entries)
        many_subscribers(
            Path(root), options.engine, options.subscribers, options.batches, options.entries
        )
        paced(
            Path(root), options.engine, options.subscribers, options.paced_rate,
            options.paced_entries, options.paced_seconds,
        )  # fmt: skip
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
