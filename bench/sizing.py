"""Sizing: memory and disk per million keys, per engine, for docs/deployment.md.

Run: `.venv/bin/python bench/sizing.py [--keys 1000000] [--engines memory rocksdb lmdb sqlite]`.

Each engine runs in a fresh process of its own: an `Application` with one 4-partition
key-value store (string keys of 16 bytes, random hex string values of 100 bytes, so
compression finds only what hex digits allow), filled through `begin_batch` in batches of
10,000, then 100,000 random key lookups (so read caches fill as a serving instance's do).
Printed per engine: resident memory after filling and after the lookups, above the
process's resident memory before the application started (the workload's own key list
made before that); the state directory's size on disk; and open file descriptors. Figures
scale with the data; a store's engine options (RocksDB's block cache, LMDB's map size)
change them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, random, sys, tempfile
from pathlib import Path
from iqstate import Application, KeyQuery, StateQueryRequest

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")

engine, keys, directory = sys.argv[1], int(sys.argv[2]), sys.argv[3]
names = [f"user-{n:011d}" for n in range(keys)]  # the workload's own memory, not the store's
lookups = random.Random(3).choices(names, k=100_000)
before = rss_mb()
app = Application("sizing", directory)
app.key_value_store("s", 4, engine=engine, value_serde="string")
app.start()
for batch_id, start in enumerate(range(0, keys, 10_000)):
    chunk = names[start:start + 10_000]
    with app.begin_batch(position={"src": {0: start + 10_000}}, batch_id=batch_id) as batch:
        batch.put_all("s", ((name, os.urandom(50).hex()) for name in chunk))
filled = rss_mb()
query = app.query
for name in lookups:
    query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(name)))
read = rss_mb()
fds = len(os.listdir("/proc/self/fd"))
app.close()
disk = sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())
print(json.dumps({"filled": filled - before, "read": read - before, "disk": disk, "fds": fds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--engines", nargs="+", default=["memory", "rocksdb", "lmdb", "sqlite"])
    args = parser.parse_args()
    millions = args.keys / 1_000_000
    print(
        f"{args.keys:,} keys (16-byte string keys, 100-byte random hex values), 4 partitions; "
        "per million keys:"
    )
    for engine in args.engines:
        with tempfile.TemporaryDirectory(prefix=f"iqstate-sizing-{engine}-") as directory:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, engine, str(args.keys), directory],
                capture_output=True, text=True, check=False, env=dict(os.environ),
            )  # fmt: skip
            if done.returncode != 0:
                print(f"  {engine}: failed\n{done.stderr[-2000:]}")
                continue
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"  {engine:<8} memory {figures['filled'] / millions:7.0f} MB filled, "
                f"{figures['read'] / millions:7.0f} MB after lookups; disk "
                f"{figures['disk'] / 2**20 / millions:7.0f} MB; {figures['fds']} open fds",
                flush=True,
            )


if __name__ == "__main__":
    main()
