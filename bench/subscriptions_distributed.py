"""What 1,000 subscribers cost a pipeline in distributed mode (issue 28), on a real broker.

In distributed mode the pipeline (Spark's executors) writes the changelog and the serving
instances follow it; subscribers are served by those instances, processes apart from the
pipeline. Here the pipeline is a `BatchWriter` in this process writing unpaced batches
(`--entries` entries over 4 partitions, each batch flushed with every acknowledgement, as
the distributed Spark sink commits); a serving instance in its own process follows the
changelog and runs `--subscribers` subscriptions of the whole store on one asyncio loop.
Measured in one run: the writer's batches per second with the instance following and no
subscribers, then with the subscribers reading; the events they received of those
expected; each figure the best of `--rounds` alternating rounds. Both processes and the
broker share this machine's cores, so what remains is contention for CPU, not for an
interpreter.

    python bench/subscriptions_distributed.py [--batches 300] [--entries 100]
        [--subscribers 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from iqstate_kafka import (
    BatchWriter,
    KafkaCluster,
    LocalBroker,
    ensure_changelog_topics,
)
from iqstate_kafka.standalone import StandaloneReplicas

from iqstate import Application, Position, Subscription, SubscriptionLaggedError
from iqstate.runtime.partitioner import partition_for_bytes

STORE, PARTITIONS = "s", 4


def serve(bootstrap: str, application_id: str, state_dir: str, subscribers: int) -> None:
    """The serving instance (a child process): follow the changelog; on `read` from stdin,
    start `subscribers` subscriptions reading every batch; on `stop`, print the events they
    received."""
    app = Application(
        application_id, Path(state_dir), cluster=StandaloneReplicas(KafkaCluster(bootstrap))
    )
    app.key_value_store(STORE, PARTITIONS, engine="rocksdb", key_serde="bytes", value_serde="bytes")
    received = [0, 0]  # events, resumes after falling behind
    newest: list[int] = []
    with app:
        print("following", flush=True)
        for command in sys.stdin:
            if command.strip() == "read":
                readers = [app.subscribe(STORE, max_pending=1 << 20) for _ in range(subscribers)]
                for subscription in readers:
                    while subscription.poll() is not None:  # the snapshots
                        pass
                newest[:] = [-1] * subscribers
                threading.Thread(
                    target=_drain, args=(app, readers, received, newest), daemon=True
                ).start()
                print("reading", flush=True)
            elif command.strip() == "stop":
                time.sleep(1.0)  # the last batches reach the followers
                print(received[0], received[1], min(newest), flush=True)
                return


def _drain(
    app: Application, readers: list[Subscription], received: list[int], newest: list[int]
) -> None:
    """Read every subscription; count the events and each reader's newest batch id (a
    replica catching up publishes the batches it applied at once as one event)."""

    async def one(number: int, subscription: Subscription) -> None:
        while True:
            try:
                async for batch in subscription:
                    received[0] += 1
                    newest[number] = max(newest[number], *(int(c.value) for c in batch.changes))
            except SubscriptionLaggedError as lagged:  # fell behind: resume, as a client does
                received[1] += 1
                subscription = app.subscribe(STORE, from_cursor=lagged.cursor, max_pending=1 << 20)

    async def every() -> None:
        await asyncio.gather(*(one(n, subscription) for n, subscription in enumerate(readers)))

    asyncio.run(every())


def write(
    cluster: KafkaCluster, application_id: str, first: int, batches: int, entries: int
) -> float:
    """Write `batches` unpaced; batches per second."""
    with BatchWriter(cluster, application_id) as writer:
        begun = time.perf_counter()
        for batch_id in range(first, first + batches):
            pending: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
            for entry in range(entries):
                key = b"key-%05d" % entry
                pending.setdefault((STORE, partition_for_bytes(key, PARTITIONS)), []).append(
                    (key, b"%d" % batch_id)
                )
            writer.write(
                pending,
                batch_id=batch_id,
                position=Position.from_map({"source": {0: batch_id}}),
                stores={STORE: PARTITIONS},
            )
        return batches / (time.perf_counter() - begun)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root, LocalBroker() as broker:
        cluster = KafkaCluster(broker.bootstrap_servers)
        application_id = f"bench-subscriptions-{os.getpid()}"
        ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
        write(cluster, application_id, 0, 10, args.entries)  # topics and writer warmed up
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", broker.bootstrap_servers, application_id,
             str(Path(root) / "instance"), str(args.subscribers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "following"
            alone, followed = [], []
            batch = 10
            for _ in range(args.rounds):
                alone.append(write(cluster, application_id, batch, args.batches, args.entries))
                batch += args.batches
            child.stdin.write("read\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "reading"
            for _ in range(args.rounds):
                followed.append(write(cluster, application_id, batch, args.batches, args.entries))
                batch += args.batches
            child.stdin.write("stop\n")
            child.stdin.flush()
            events, resumes, slowest = map(int, child.stdout.readline().split())
        finally:
            child.kill()
            child.wait()
    expected = args.rounds * args.batches * PARTITIONS * args.subscribers
    best_alone, best_followed = max(alone), max(followed)
    print(
        f"writer, {args.entries} entries a batch: {best_alone:,.0f} batches/s with the instance "
        f"following, {best_followed:,.0f} with {args.subscribers} subscribers reading there "
        f"({best_followed / best_alone - 1:+.0%}); rounds {[round(r) for r in alone]} / "
        f"{[round(r) for r in followed]}; the subscribers received {events:,} events "
        f"({expected:,} batch-partitions written) and resumed {resumes:,} times after falling "
        f"behind; the slowest had batch {slowest} of {batch - 1}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
