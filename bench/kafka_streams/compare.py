"""iqstate against Apache Kafka Streams 4.4.0 on the same broker and the same data, the two
sides alternated in one run; prints the ratios iqstate / Kafka Streams.

One broker (`LocalBroker`, unless `--bootstrap` names one). The same `--records` keys with
100-character string values over `--partitions` partitions go to iqstate's changelog and to
Kafka Streams' (data.py). Then `--rounds` rounds, each running Kafka Streams' side
(`java -jar target/harness.jar bench`, built here with `mvn -q package` if missing) and
iqstate's (iqstate_worker.py), each in its own process, the order swapped every round:

* restore: a fresh state directory, from `start()` until every partition answers the key
  written last to it (Kafka Streams: RUNNING too; iqstate: every changelog's end committed);
* `KeyQuery` over all partitions, and `KeyQuery` naming its partition: `--operations` random
  existing keys in a tight loop, best of 3 passes after a warm-up of `--warmup` lookups;
* `RangeQuery` of 100 keys on one partition: a tenth as many, likewise.

Then `--failover-rounds` rounds of failover with one standby (failover.py): iqstate at its
defaults, Kafka Streams at its defaults and with `session.timeout.ms=6000`.

    python bench/kafka_streams/compare.py            # the full comparison (1M records)
    python bench/kafka_streams/compare.py --quick    # a smoke run (20,000 records)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from data import (
    last_written,
    partition_of,
    shuffled_keys,
    write_iqstate_changelog,
    write_streams_changelog,
    write_workload,
)
from failover import iqstate_failover, streams_failover
from iqstate_kafka import KafkaCluster, LocalBroker

HERE = Path(__file__).resolve().parent
JAR = HERE / "target" / "harness.jar"
MEASURES = ("key_all", "key_partition", "range100")
LABELS = {
    "key_all": "KeyQuery, all partitions",
    "key_partition": "KeyQuery naming its partition",
    "range100": "RangeQuery of 100 keys, one partition",
}


def ensure_jar() -> Path:
    """The harness jar, built with Maven when missing or older than its sources."""
    sources = [HERE / "pom.xml", *(HERE / "src").rglob("*.java")]
    newest = max(path.stat().st_mtime for path in sources)
    if not JAR.exists() or JAR.stat().st_mtime < newest:
        print("building the Kafka Streams harness (mvn -q package)...", flush=True)
        subprocess.run(["mvn", "-q", "-B", "package"], cwd=HERE, check=True)
    return JAR


def java_command(heap: str) -> list[str]:
    return ["java", f"-Xmx{heap}", f"-Xms{heap}", "-jar", str(ensure_jar())]


def run_json(command: list[str], log: Path) -> dict[str, Any]:
    """Run a side's process; its last stdout line is its JSON report."""
    with log.open("ab") as errors:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{command[:4]}... exited {done.returncode}:\n{tail}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def streams_round(args: argparse.Namespace, app_id: str, root: Path) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="streams-state-", dir=root)
    options = {
        "bootstrap": args.bootstrap, "app-id": app_id, "state-dir": state,
        "input": f"{app_id}-input", "store": "kv", "store-kind": args.store_kind,
        "workload": str(root / "workload.txt"), "operations": str(args.operations),
        "warmup": str(args.java_warmup), "repeats": str(args.repeats),
    }  # fmt: skip
    flags = [part for name, value in options.items() for part in (f"--{name}", value)]
    return run_json([*java_command(args.heap), "bench", *flags], root / "streams.log")


def iqstate_round(args: argparse.Namespace, app_id: str, root: Path) -> dict[str, Any]:
    command = [
        sys.executable, str(HERE / "iqstate_worker.py"), "--bootstrap", args.bootstrap,
        "--app-id", app_id, "--partitions", str(args.partitions),
        "--workload", str(root / "workload.txt"), "--operations", str(args.operations),
        "--warmup", str(args.warmup), "--repeats", str(args.repeats),
    ]  # fmt: skip
    if args.iqstate_compression:
        command += ["--compression", args.iqstate_compression]
    if args.iqstate_reader_processes:
        command += ["--reader-processes", str(args.iqstate_reader_processes)]
    return run_json(command, root / "iqstate.log")


def check_found(side: str, report: dict[str, Any], operations: int) -> None:
    """Every lookup found its key and every range read 100 rows, or the figures mean nothing."""
    ranges = max(1, operations // 10)
    expected = {"key_all": operations, "key_partition": operations, "range100": 100 * ranges}
    for name, count in expected.items():
        if report[f"{name}_found"] != count:
            raise RuntimeError(f"{side} {name}: found {report[f'{name}_found']}, not {count}")


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def bench_rounds(
    args: argparse.Namespace, apps: dict[str, str], root: Path
) -> dict[str, list[dict[str, Any]]]:
    """Alternate the two sides (order swapped each round); every report by side."""
    reports: dict[str, list[dict[str, Any]]] = {"iqstate": [], "streams": []}
    for number in range(args.rounds):
        order = ["streams", "iqstate"] if number % 2 == 0 else ["iqstate", "streams"]
        for side in order:
            run = streams_round if side == "streams" else iqstate_round
            report = run(args, apps[side], root)
            check_found(side, report, args.operations)
            report["load"] = load_average()
            reports[side].append(report)
            print(f"  round {number + 1} {side:8s} {summary(report)}", flush=True)
    return reports


def summary(report: dict[str, Any]) -> str:
    parts = [f"restore {report['restore_seconds']:.2f} s"]
    if "restore_listener_seconds" in report:
        parts[0] += (
            f" (first restore callback after {report['start_to_first_restore_seconds']:.2f} s,"
            f" restoring {report['restore_listener_seconds']:.2f} s,"
            f" {report['restored_records']:,} records)"
        )
    parts += [f"{name} {min(report[f'{name}_us']):.2f} us" for name in MEASURES]
    return ", ".join(parts) + f" (load {report['load']})"


def print_ratios(reports: dict[str, list[dict[str, Any]]], records: int) -> None:
    """Per round and overall: each side's figure and iqstate / Kafka Streams."""
    print("\nper round, iqstate / Kafka Streams (lookups: time per query; restore: rate)")
    for name in (*MEASURES, "restore"):
        ratios = []
        for ours, theirs in zip(reports["iqstate"], reports["streams"], strict=True):
            if name == "restore":
                ratios.append(theirs["restore_seconds"] / ours["restore_seconds"])
            else:
                ratios.append(min(ours[f"{name}_us"]) / min(theirs[f"{name}_us"]))
        label = LABELS.get(name, f"restore of {records:,} records")
        print(f"  {label:40s} {' '.join(f'{r:.2f}' for r in ratios)}")
    for side, title in (("iqstate", "iqstate"), ("streams", "Kafka Streams")):
        rates = [records / r["restore_seconds"] for r in reports[side]]
        figures = ", ".join(
            f"{name} " + "/".join(f"{min(r[name + '_us']):.1f}" for r in reports[side]) + " us"
            for name in MEASURES
        )
        print(f"  {title}: restore {'/'.join(f'{x / 1000:.0f}k' for x in rates)} records/s; "
              f"{figures}")  # fmt: skip


def failover_rounds(
    args: argparse.Namespace, apps: dict[str, str], keys: list[str], root: Path
) -> None:
    """Alternate iqstate's failover with Kafka Streams' at its defaults and at 6 s."""
    key = last_written(keys, args.partitions)[0]
    partition = partition_of(key, args.partitions)
    base = {"bootstrap": args.bootstrap, "app-id": apps["streams"], "store": "kv",
            "input": f"{apps['streams']}-input", "store-kind": args.store_kind,
            "standbys": "1"}  # fmt: skip
    sides = {
        "iqstate (liveness 3 s)": lambda work: iqstate_failover(
            args.bootstrap, apps["iqstate"], args.partitions, work, key, partition
        ),
        "Kafka Streams (defaults)": lambda work: streams_failover(
            java_command(args.heap), base, work, key, partition
        ),
        "Kafka Streams (session 6 s)": lambda work: streams_failover(
            java_command(args.heap), {**base, "session-timeout-ms": "6000"}, work, key, partition
        ),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    print(f"\nfailover after SIGKILL, one standby, key {key} (partition {partition})")
    for number in range(args.failover_rounds):
        for name, run in sides.items():
            work = Path(tempfile.mkdtemp(prefix="failover-", dir=root))
            result = run(work)
            result["load"] = load_average()
            results[name].append(result)
            print(
                f"  round {number + 1} {name:28s} {result['seconds']:.2f} s, "
                f"{result['failures']} failed asks (load {result['load']})",
                flush=True,
            )
    ours = statistics.median(r["seconds"] for r in results["iqstate (liveness 3 s)"])
    for name in list(sides)[1:]:
        theirs = statistics.median(r["seconds"] for r in results[name])
        print(f"  iqstate / {name}: {ours:.2f} s / {theirs:.2f} s = {ours / theirs:.2f}")


def prepare(args: argparse.Namespace, root: Path) -> tuple[dict[str, str], list[str]]:
    """Write both changelogs and the workload; the application id of each side."""
    run_id = uuid.uuid4().hex[:8]
    apps = {"iqstate": f"iq-vs-ks-{run_id}", "streams": f"ks-vs-iq-{run_id}"}
    keys = shuffled_keys(args.records)
    cluster = KafkaCluster(args.bootstrap, timeout=30.0)
    write_iqstate_changelog(cluster, apps["iqstate"], keys, args.partitions, args.batch)
    write_streams_changelog(args.bootstrap, apps["streams"], keys, args.partitions)
    ranges = max(1, args.operations // 10)
    write_workload(root / "workload.txt", keys, args.partitions, args.lookup_keys, ranges)
    return apps, keys


def compare(args: argparse.Namespace) -> None:
    ensure_jar()
    with tempfile.TemporaryDirectory(prefix="iqstate-vs-streams-") as directory:
        root = Path(directory)
        print(f"machine: {os.cpu_count()} cores, load {load_average()}; "
              f"{args.records:,} records, {args.partitions} partitions", flush=True)  # fmt: skip
        apps, keys = prepare(args, root)
        print(f"changelogs written (load {load_average()}); logs in {root}", flush=True)
        if args.rounds:
            print_ratios(bench_rounds(args, apps, root), args.records)
        if args.failover_rounds:
            failover_rounds(args, apps, keys, root)
        if args.keep_logs:
            for log in root.glob("*.log"):
                (Path(args.keep_logs) / log.name).write_bytes(log.read_bytes())


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50_000, help="iqstate's batch size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--operations", type=int, default=200_000, help="lookups per pass")
    parser.add_argument("--warmup", type=int, default=20_000, help="iqstate's warm-up lookups")
    parser.add_argument("--java-warmup", type=int, default=200_000, help="the JVM's (JIT)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per round")
    parser.add_argument("--lookup-keys", type=int, default=100_000)
    parser.add_argument("--failover-rounds", type=int, default=2)
    parser.add_argument("--store-kind", choices=("table", "processor"), default="table")
    parser.add_argument("--heap", default="1g", help="the JVM's -Xmx and -Xms")
    parser.add_argument(
        "--iqstate-compression", help="iqstate's RocksDB compression (default: its own, lz4)"
    )
    parser.add_argument(
        "--iqstate-reader-processes",
        type=int,
        default=0,
        help="iqstate's follower reads in this many worker processes (default 0: in its own)",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--keep-logs", help="copy the sides' logs to this directory")
    parser.add_argument("--quick", action="store_true", help="20,000 records, small loops")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds, args.operations = 20_000, 2, 20_000
        args.warmup, args.java_warmup, args.lookup_keys, args.batch = 2_000, 20_000, 10_000, 5_000
        args.failover_rounds = min(args.failover_rounds, 1)
    return args


def main() -> None:
    args = parse()
    if args.bootstrap:
        compare(args)
        return
    with LocalBroker() as broker:
        args.bootstrap = broker.bootstrap_servers
        compare(args)


if __name__ == "__main__":
    main()
