"""The serving tier over the network (issue 22): two or three instances, each in its own
process, serving one store of many rows with a static layout (6 partitions, a standby
each: tests/http/range_instance.py, launched by path), measured from this process over
loopback HTTP. Four measurements, printed as a table:

1. **forwarded lookup**: `GET /v1/stores/rows/keys/{key}` sent to an instance that is not
   the key's running active (it forwards one hop; the answer's `host` names the owner),
   against the same lookups sent to the owner; each side on its own keep-alive
   `httpx.Client`, sequential, `--lookups` each, in interleaved rounds; median and p99.
2. **routing client**: `RemoteQueryClient.query` of a `KeyQuery` in the steady state (after
   a warm-up; it refreshes its layout every 5 s, as it does in use), against one `GET` of
   the key route to the key's owner on a plain `httpx.Client` with the body's JSON read
   (`.json()["value"]`), interleaved rounds; median and p99.
3. **paging**: the whole store through `RemoteQueryClient.range` at page sizes 1,000 and
   10,000, each on a cluster started for it: rows/s, the time of the first and the last
   page, and each instance's peak RSS growth while it pages (VmRSS of /proc/<pid>/status
   sampled every 50 ms from a thread, from a baseline taken after the instance collected
   garbage and trimmed its heap: SIGUSR1). A page size that has not reached the end after
   `--range-seconds` stops there and says so.
4. **concurrent ranges**: `--concurrent` full-store requests released at once (threads,
   one connection each): unmerged `POST /v1/query` ranges spread over the instances (over
   `max_rows` (100,000) rows, so each must be a 422 `too_many_rows` or a 503 `busy` with
   `Retry-After`), and `--pagers` of them merged pagers (`RemoteQueryClient.range`,
   page size 1,000, a page refused with a 503 read again from the last key after a
   second) that page for at most `--range-seconds`; the answers by status, and each
   instance's peak RSS growth (a cluster started for it).

Ratios against a baseline measured in the same run; nothing is asserted on time.

    python bench/http_cluster.py [--rows 1000000] [--lookups 5000] [--instances 2|3]
        [--values json|int] [--engine memory] [--concurrent 200] [--pagers 20]
        [--range-seconds 60] [--measure forward client paging concurrent]
        [--max-rows N] [--max-active N] [--max-waiting N] [--wait-timeout S] [--quick]

`--max-rows` and the `--max-*`/`--wait-timeout` of `RangeLimits` go to the instances.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from iqstate_http import RemoteQueryClient
from iqstate_http.client_plan import PageError
from timing import calibration_line

from iqstate import KeyQuery, StateQueryRequest
from iqstate.runtime import partition_for_bytes

INSTANCE = Path(__file__).resolve().parent.parent / "tests" / "http" / "range_instance.py"
STORE, PARTITIONS = "rows", 6
MB = 1024 * 1024


def key_for(i: int) -> str:
    return f"key-{i:07d}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


class Cluster:
    """`count` instances of tests/http/range_instance.py, each its own process."""

    def __init__(self, count: int, rows: int, values: str, engine: str, options: list[str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="iqstate-bench-cluster-"))
        self.hosts = [f"127.0.0.1:{free_port()}" for _ in range(count)]
        self.processes: list[subprocess.Popen[str]] = []
        for number in range(count):
            command = [sys.executable, str(INSTANCE), "--hosts", ",".join(self.hosts)]
            command += ["--me", str(number), "--state-dir", str(self.root / str(number))]
            command += ["--rows", str(rows), "--values", values, "--engine", engine, *options]
            self.processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
        for process in self.processes:
            line = self._line(process)
            if not line.startswith("ready"):
                raise SystemExit(f"an instance did not start: {line!r}")
        self.urls = [f"http://{host}" for host in self.hosts]
        metadata = httpx.get(f"{self.urls[0]}/v1/metadata", timeout=10).json()
        self.owner = {
            p: f"http://{m['host']}:{m['port']}" for m in metadata for p in m["active"][STORE]
        }
        assert sorted(self.owner) == list(range(PARTITIONS)), metadata

    @staticmethod
    def _line(process: subprocess.Popen[str]) -> str:
        assert process.stdout is not None
        return process.stdout.readline().strip()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def trim(self) -> list[int]:
        """Every instance collects garbage and trims its heap: their VmRSS after, bytes."""
        for process in self.processes:
            process.send_signal(signal.SIGUSR1)
        rss = []
        for process in self.processes:
            line = self._line(process)
            assert line.startswith("trimmed"), line
            rss.append(int(line.split()[1]) * 1024)
        return rss

    def owner_of(self, key: str) -> str:
        return self.owner[partition_for_bytes(key.encode(), PARTITIONS)]

    def stop(self) -> None:
        """End the processes this bench started, by their PIDs."""
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class RssWatch:
    """Samples each process's VmRSS every `interval` seconds in a thread, keeping the peak."""

    pids: list[int]
    interval: float = 0.05
    base: list[int] = field(default_factory=list)
    peak: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _sample(self) -> None:
        for number, pid in enumerate(self.pids):
            self.peak[number] = max(self.peak[number], rss_bytes(pid))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    @contextlib.contextmanager
    def watching(self) -> Iterator[RssWatch]:
        self.base = [rss_bytes(pid) for pid in self.pids]
        self.peak = list(self.base)
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self._sample()

    def growth_mb(self) -> list[float]:
        return [(peak - base) / MB for peak, base in zip(self.peak, self.base, strict=True)]

    def describe(self) -> str:
        return ", ".join(
            f"{base / MB:.0f} -> {peak / MB:.0f} MB (+{(peak - base) / MB:.1f})"
            for base, peak in zip(self.base, self.peak, strict=True)
        )


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered) * 1e3,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        "mean": statistics.fmean(ordered) * 1e3,
    }


def interleaved(
    keys: list[str], rounds: int, sides: list[Callable[[str], None]]
) -> list[list[float]]:
    """Each side's per-call seconds over `keys`, split into `rounds` rounds, the sides
    taking turns within a round (and which goes first alternating between rounds)."""
    times: list[list[float]] = [[] for _ in sides]
    size = max(1, len(keys) // rounds)
    for number in range(rounds):
        chunk = keys[number * size : (number + 1) * size]
        order = list(range(len(sides)))
        if number % 2:
            order.reverse()
        for side in order:
            call, out = sides[side], times[side]
            for key in chunk:
                start = time.perf_counter()
                call(key)
                out.append(time.perf_counter() - start)
    return times


Row = tuple[str, str, str, str]


def forwarded_lookups(cluster: Cluster, args: argparse.Namespace, rng: random.Random) -> Row:
    """Measurement 1: a lookup forwarded one hop against the same lookup at its owner."""
    keys = [key_for(rng.randrange(args.rows)) for _ in range(args.lookups)]
    askers = {
        key: rng.choice([url for url in cluster.urls if url != cluster.owner_of(key)])
        for key in keys
    }
    forwarding, direct = httpx.Client(timeout=30), httpx.Client(timeout=30)

    def via_other(key: str) -> None:
        asked = askers[key]
        answer = forwarding.get(f"{asked}/v1/stores/{STORE}/keys/{key}")
        body = answer.json()
        assert answer.status_code == 200 and body["value"] is not None, answer.text
        assert f"http://{body['host']}" == cluster.owner_of(key) != asked, (asked, body)

    def at_owner(key: str) -> None:
        answer = direct.get(f"{cluster.owner_of(key)}/v1/stores/{STORE}/keys/{key}")
        assert answer.status_code == 200 and answer.json()["value"] is not None, answer.text

    try:
        interleaved(keys[:200], 1, [via_other, at_owner])  # warm-up: connections, caches
        forwarded, owned = interleaved(keys, args.rounds, [via_other, at_owner])
    finally:
        forwarding.close()
        direct.close()
    hop, own = percentiles(forwarded), percentiles(owned)
    print(
        f"\n1. key lookups, {len(owned):,} a side, sequential, {args.rounds} interleaved rounds"
        f"\n   at the owner:       median {own['median']:.3f} ms  p99 {own['p99']:.3f} ms  "
        f"mean {own['mean']:.3f} ms"
        f"\n   forwarded one hop:  median {hop['median']:.3f} ms  p99 {hop['p99']:.3f} ms  "
        f"mean {hop['mean']:.3f} ms"
    )
    ratio = hop["median"] / own["median"]
    return (
        "forwarded key lookup / at the owner",
        f"{ratio:.2f}x median, {hop['p99'] / own['p99']:.2f}x p99",
        "<= 1.6x",
        "met" if ratio <= 1.6 else f"not met (+{(ratio / 1.6 - 1) * 100:.0f}%)",
    )


def routing_client(cluster: Cluster, args: argparse.Namespace, rng: random.Random) -> Row:
    """Measurement 2: `RemoteQueryClient.query` of a key against one direct GET."""
    keys = [key_for(rng.randrange(args.rows)) for _ in range(args.lookups)]
    client = RemoteQueryClient(cluster.urls[0])
    direct = httpx.Client(timeout=30)

    def routed(key: str) -> None:
        request = StateQueryRequest.in_store(STORE).with_query(KeyQuery.with_key(key))
        found = client.query(request).only_partition_result()
        assert found is not None and found.result is not None

    def plain(key: str) -> None:
        value = direct.get(f"{cluster.owner_of(key)}/v1/stores/{STORE}/keys/{key}").json()
        assert value["value"] is not None

    try:
        interleaved(keys[:200], 1, [routed, plain])
        through_client, baseline = interleaved(keys, args.rounds, [routed, plain])
    finally:
        client.close()
        direct.close()
    ours, theirs = percentiles(through_client), percentiles(baseline)
    print(
        f"\n2. the routing client, {len(baseline):,} lookups a side, {args.rounds} "
        f"interleaved rounds"
        f"\n   httpx GET + .json():       median {theirs['median']:.3f} ms  "
        f"p99 {theirs['p99']:.3f} ms  mean {theirs['mean']:.3f} ms"
        f"\n   RemoteQueryClient.query:   median {ours['median']:.3f} ms  "
        f"p99 {ours['p99']:.3f} ms  mean {ours['mean']:.3f} ms"
    )
    ratio = ours["median"] / theirs["median"]
    return (
        "RemoteQueryClient.query / direct GET",
        f"{ratio:.2f}x median, {ours['p99'] / theirs['p99']:.2f}x p99",
        "<= 1.15x",
        "met" if ratio <= 1.15 else f"not met (+{(ratio / 1.15 - 1) * 100:.0f}%)",
    )


@dataclass
class Paged:
    rows: int = 0
    complete: bool = False
    seconds: float = 0.0
    pages: list[float] = field(default_factory=list)
    busy: int = 0
    """Pages refused `503 busy` (this instance's range gate full) and read again."""
    unavailable: int = 0
    """Pages refused `503 partitions_unavailable` (another instance's gate refused the
    forwarded part) and read again."""
    error: str | None = None


def page_through(url: str, rows: int, page_size: int, budget: float, resume: bool) -> Paged:
    """The whole store through `RemoteQueryClient.range`, every key checked in order,
    until it ends or `budget` seconds pass; the time of each page. With `resume`, a page
    refused with a 503 (a full range gate) is read again from the last key, after a second
    (its `Retry-After`); without, it ends the paging."""
    paged = Paged()
    client = RemoteQueryClient(url, timeout=300)
    start = last = time.perf_counter()
    lower: str | None = None
    try:
        while True:
            try:
                for key, value in client.range(STORE, lower=lower, page_size=page_size):
                    if key == lower:
                        continue
                    assert key == key_for(paged.rows) and value is not None, (key, paged.rows)
                    paged.rows += 1
                    lower = key
                    if paged.rows % page_size == 0:
                        now = time.perf_counter()
                        paged.pages.append(now - last)
                        last = now
                        if now - start > budget:
                            return paged
                paged.complete = paged.rows == rows
                return paged
            except PageError as error:
                if not resume or error.status != 503:
                    raise
                if "partitions_unavailable" in str(error) or "needs every partition" in str(error):
                    paged.unavailable += 1
                else:
                    paged.busy += 1
                if time.perf_counter() - start > budget:
                    return paged
                time.sleep(1)
    except Exception as error:  # counted by the caller (a refused page, a timeout)
        paged.error = f"{type(error).__name__}: {str(error)[:200]}"
        return paged
    finally:
        paged.seconds = time.perf_counter() - start
        client.close()


def paging(start: Callable[[], Cluster], args: argparse.Namespace) -> list[Row]:
    """Measurement 3: the whole store, paged, one client, each page size on a cluster
    started for it (so that no measurement starts from what another left in the heap)."""
    results = []
    print(f"\n3. paging {args.rows:,} rows through RemoteQueryClient.range, one client")
    for page_size in (1000, 10_000):
        cluster = start()
        try:
            cluster.trim()
            watch = RssWatch(cluster.pids)
            with watch.watching():
                paged = page_through(
                    cluster.urls[0], args.rows, page_size, args.range_seconds, resume=False
                )
        finally:
            cluster.stop()
        rate = paged.rows / paged.seconds
        reach = "the end" if paged.complete else f"row {paged.rows:,} (stopped at the budget)"
        if paged.error:
            reach = f"row {paged.rows:,}: {paged.error}"
        first = paged.pages[0] * 1e3 if paged.pages else float("nan")
        final = paged.pages[-1] * 1e3 if paged.pages else float("nan")
        print(
            f"   page size {page_size:>6,}: {paged.rows:,} rows to {reach} in "
            f"{paged.seconds:.1f} s, {rate:,.0f} rows/s; first page {first:.0f} ms, "
            f"last {final:.0f} ms\n      RSS: {watch.describe()}"
        )
        growth = max(watch.growth_mb())
        results.append(
            (
                f"paging, page size {page_size:,}",
                f"{rate:,.0f} rows/s{'' if paged.complete else ' (partial)'}; "
                f"RSS +{growth:.1f} MB (worst instance)",
                "RSS < 64 MB",
                "met" if growth < 64 else f"not met ({growth / 64:.1f}x)",
            )
        )
    return results


def unmerged_outcome(answer: httpx.Response) -> str:
    """What an unmerged full-store range got: a 422 or 503 and its code (`busy` with
    `Retry-After` or without), a complete 200, or a 200 whose failed partitions are named."""
    body = answer.json()
    if answer.status_code != 200:
        code = body.get("error", {}).get("code")
        if answer.status_code == 503 and code == "busy":
            told = "Retry-After" if "retry-after" in answer.headers else "NO Retry-After"
            return f"503 busy, {told}"
        return f"{answer.status_code} {code}"
    failed = [e for e in body["partitions"].values() if not e["ok"]]
    if not failed:
        return "200 complete"
    reasons = sorted({e["failure"] + (" busy" if "busy" in e["message"] else "") for e in failed})
    return f"200 with {len(failed)} partitions failed ({', '.join(reasons)})"


def concurrent_ranges(cluster: Cluster, args: argparse.Namespace) -> Row:
    """Measurement 4: many full-store ranges at once."""
    cluster.trim()
    unmerged = args.concurrent - args.pagers
    gate = threading.Barrier(args.concurrent + 1)
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    pager_results: list[Paged] = []

    def unmerged_range(number: int) -> None:
        url = cluster.urls[number % len(cluster.urls)]
        with httpx.Client(timeout=600) as http:
            gate.wait()
            try:
                answer = http.post(
                    f"{url}/v1/query", json={"store": STORE, "query": {"type": "range"}}
                )
                outcome = unmerged_outcome(answer)
            except httpx.HTTPError as error:
                outcome = type(error).__name__
        with lock:
            statuses["unmerged " + outcome] += 1

    def pager(number: int) -> None:
        gate.wait()
        paged = page_through(
            cluster.urls[number % len(cluster.urls)], args.rows, 1000, args.range_seconds,
            resume=True,
        )  # fmt: skip
        with lock:
            pager_results.append(paged)

    threads = [threading.Thread(target=unmerged_range, args=(n,)) for n in range(unmerged)]
    threads += [threading.Thread(target=pager, args=(n,)) for n in range(args.pagers)]
    for thread in threads:
        thread.start()
    watch = RssWatch(cluster.pids)
    with watch.watching():
        start = time.perf_counter()
        gate.wait()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start
    for paged in pager_results:
        if paged.error:
            statuses["pager failed: " + paged.error[:80]] += 1
        else:
            statuses["pager " + ("complete" if paged.complete else "stopped at budget")] += 1
    busy = sum(paged.busy for paged in pager_results)
    unavailable = sum(paged.unavailable for paged in pager_results)
    paged_rows = sum(paged.rows for paged in pager_results)
    print(
        f"\n4. {args.concurrent} full-store ranges at once ({unmerged} unmerged POST /v1/query, "
        f"{args.pagers} pagers of 1,000-row pages), {seconds:.1f} s; the pagers read "
        f"{paged_rows:,} rows; pages refused and read again: {busy} 503 busy, "
        f"{unavailable} 503 partitions_unavailable"
        f"\n   RSS: {watch.describe()}"
    )
    for outcome, count in sorted(statuses.items()):
        print(f"   {count:>4} {outcome}")
    growth = max(watch.growth_mb())
    errors = [o for o in statuses if o.startswith(("unmerged 5", "pager failed"))
              and "busy, Retry-After" not in o]  # fmt: skip
    counted = Counter(o.split(",")[0].split(" (")[0] for o in statuses.elements())
    return (
        f"{args.concurrent} concurrent full ranges",
        f"RSS +{growth:.0f} MB (worst instance); "
        + ", ".join(f"{outcome}: {count}" for outcome, count in sorted(counted.items())),
        "bounded; 200/422/503 busy only",
        "no other answer" if not errors else f"{len(errors)} other outcomes",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--instances", type=int, choices=[2, 3], default=2)
    parser.add_argument("--values", choices=["json", "int"], default="json")
    parser.add_argument("--engine", default="memory")
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--pagers", type=int, default=20)
    parser.add_argument("--range-seconds", type=float, default=60.0)
    parser.add_argument("--max-rows", type=int, help="the instances' max_rows")
    parser.add_argument("--max-active", type=int, help="RangeLimits.max_active")
    parser.add_argument("--max-waiting", type=int, help="RangeLimits.max_waiting")
    parser.add_argument("--wait-timeout", type=float, help="RangeLimits.wait_timeout")
    parser.add_argument(
        "--measure", nargs="+", choices=["forward", "client", "paging", "concurrent"],
        default=["forward", "client", "paging", "concurrent"],
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.lookups, args.rounds = 20_000, 400, 4
        args.concurrent, args.pagers, args.range_seconds = 20, 4, 10.0
    print(calibration_line())
    started = time.perf_counter()
    options = []
    for name in ("max_rows", "max_active", "max_waiting", "wait_timeout"):
        if getattr(args, name) is not None:
            options += ["--" + name.replace("_", "-"), str(getattr(args, name))]

    def start() -> Cluster:
        began = time.perf_counter()
        cluster = Cluster(args.instances, args.rows, args.values, args.engine, options)
        print(
            f"   ({args.instances} instances ready in {time.perf_counter() - began:.1f} s; "
            "RSS after trimming: " + ", ".join(f"{rss / MB:.0f} MB" for rss in cluster.trim()) + ")"
        )
        return cluster

    print(
        f"{args.instances} instances, each its own process: {args.engine} engine, "
        f"{args.rows:,} rows, {args.values} values, {PARTITIONS} partitions, one standby each"
    )
    rng = random.Random(22)
    table: list[Row] = []
    if {"forward", "client"} & set(args.measure):
        cluster = start()
        try:
            if "forward" in args.measure:
                table.append(forwarded_lookups(cluster, args, rng))
            if "client" in args.measure:
                table.append(routing_client(cluster, args, rng))
        finally:
            cluster.stop()
    if "paging" in args.measure:
        table.extend(paging(start, args))
    if "concurrent" in args.measure:
        cluster = start()
        try:
            table.append(concurrent_ranges(cluster, args))
        finally:
            cluster.stop()
    print("\n| measurement | result | target | |\n|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    print(json.dumps({"total_seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
