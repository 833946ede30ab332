"""One serving instance of a store of many rows, run as its own process: the cluster of
tests/http/test_range_memory.py and bench/http_cluster.py.

    python range_instance.py --hosts 127.0.0.1:P1,127.0.0.1:P2[,...] --me I --state-dir D
        [--rows N] [--values json|int] [--engine memory] [--max-rows M]
        [--max-active A] [--max-waiting W] [--wait-timeout S]

Store `rows` (string keys, 6 partitions) holds `key-0000000` ... with `value_for(i)` as
values (zero-padded, so key order is number order). The layout is static, one standby per
partition: partition p's running active is `hosts[p % n]`, its standby `hosts[(p + 1) %
n]` (two instances: the first is active of the even partitions and standby of the odd
ones, the second the reverse). The instance first hosts its replicas as running actives
to write their rows (`batch.put_all` in chunks of 10,000: every replica holds what its
active holds), then takes the layout, serves HTTP on its host, gives back the heap
the writes left (as on SIGUSR1, below), prints "ready <VmRSS kB>" and runs until killed.

SIGUSR1 makes it collect garbage and give freed heap back to the system (`malloc_trim`),
then print "trimmed <VmRSS kB>": a measurement starts from a baseline without the
garbage of the one before (the main thread answers it; it does nothing else).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import signal
import sys
import time
from pathlib import Path
from typing import Any

from iqstate import ACTIVE, STANDBY, Application, Assignment, HostInfo, StaticAssignment

STORE = "rows"
PARTITIONS = 6
CHUNK = 10_000
REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1")
SCRIPT = Path(__file__).resolve()


def key_for(i: int) -> str:
    return f"key-{i:07d}"


def value_for(i: int, kind: str = "json") -> Any:
    """Row `i`'s value: a JSON record of about 100 bytes, or `i` itself (`int`)."""
    if kind == "int":
        return i
    return {
        "user": f"u-{i * 7919 % 10**10:010d}",
        "clicks": i % 100_000,
        "spend": round(i % 100_000 / 100, 2),
        "region": REGIONS[i % len(REGIONS)],
        "active": i % 2 == 0,
        "seen": 1_700_000_000_000 + i,
    }


def layout(hosts: list[HostInfo]) -> dict[HostInfo, Assignment]:
    """Partition p: running active on `hosts[p % n]`, standby on `hosts[(p + 1) % n]`."""
    roles: dict[HostInfo, dict[int, Any]] = {host: {} for host in hosts}
    for p in range(PARTITIONS):
        roles[hosts[p % len(hosts)]][p] = ACTIVE
        roles[hosts[(p + 1) % len(hosts)]][p] = STANDBY
    return {host: Assignment({STORE: parts}) for host, parts in roles.items()}


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def trim_heap() -> int:
    """Collect garbage, return freed heap to the system; the VmRSS after, in kB."""
    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc is not None:
        ctypes.CDLL(libc).malloc_trim(0)
    return rss_kb()


def on_sigusr1(*_: object) -> None:
    print(f"trimmed {trim_heap()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--me", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--values", choices=["json", "int"], default="json")
    parser.add_argument("--engine", default="memory")
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument("--max-active", type=int, default=None)
    parser.add_argument("--max-waiting", type=int, default=None)
    parser.add_argument("--wait-timeout", type=float, default=None)
    args = parser.parse_args()

    from iqstate_http import start_background
    from iqstate_http.admission import RangeLimits

    hosts = [HostInfo.parse(host) for host in args.hosts.split(",")]
    me = hosts[args.me]
    cluster = layout(hosts)
    mine = dict(cluster[me].roles[STORE])
    writing = StaticAssignment({me: Assignment({STORE: dict.fromkeys(mine, ACTIVE)})})
    app = Application("range-cluster", args.state_dir, str(me), assignment=writing)
    spec = app.key_value_store(STORE, PARTITIONS, engine=args.engine, value_serde=args.values)
    app.start()
    serialize = spec.key_serde.serialize
    for number, first in enumerate(range(0, args.rows, CHUNK), 1):
        rows = []
        for i in range(first, min(first + CHUNK, args.rows)):
            key = key_for(i)
            if spec.partition_of(key, serialize(key)) in mine:
                rows.append((key, value_for(i, args.values)))
        with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
            batch.put_all(STORE, rows)
    writing.rebalance(cluster)

    service: dict[str, Any] = {}
    if args.max_rows is not None:
        service["max_rows"] = args.max_rows
    limits = {
        name: value
        for name, value in (
            ("max_active", args.max_active),
            ("max_waiting", args.max_waiting),
            ("wait_timeout", args.wait_timeout),
        )
        if value is not None
    }
    if limits:
        service["range_limits"] = RangeLimits(**limits)
    start_background(app, host=me.host, port=me.port, **service)
    signal.signal(signal.SIGUSR1, on_sigusr1)
    print(f"ready {trim_heap()}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
