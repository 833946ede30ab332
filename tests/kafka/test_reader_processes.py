"""Reading changelogs in worker processes (`Follower(reader_processes=N)`), on a real broker
with RocksDB: a replica restored that way holds every key's true value and commits the end
of every changelog, then keeps following; a worker killed with SIGKILL in the middle of a
restore is replaced and the restore still ends with the true values (nothing applied twice
or skipped, the offsets committed in the stores say where to start again); closing the
application leaves no worker behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from iqstate_kafka import BatchWriter, KafkaCluster, ensure_changelog_topics
from iqstate_kafka.reader import ChangelogUnit
from iqstate_kafka.reader_processes import ProcessChangelogConsumer
from iqstate_kafka.standalone import StandaloneReplicas
from replica_support import eventually

from iqstate import Application, Position, RangeQuery, StateQueryRequest, TopicPartition
from iqstate.runtime.partitioner import partition_for_bytes

STORE = "s"
PARTITIONS = 4
WORKER_MODULE = "iqstate_kafka.reader_processes"


def write_batches(
    cluster: KafkaCluster, application_id: str, batches: int, keys: int, first_batch: int = 0
) -> dict[bytes, bytes | None]:
    """Batches of random puts and deletes over `keys` keys; the contents they leave."""
    rng = random.Random(first_batch)
    truth: dict[bytes, bytes | None] = {}
    with BatchWriter(cluster, application_id) as writer:
        for batch_id in range(first_batch, first_batch + batches):
            entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
            for _ in range(keys // 2):
                key = b"key-%06d" % rng.randrange(keys)
                value = None if rng.random() < 0.1 else b"%d-%d" % (batch_id, rng.random() * 1e9)
                partition = partition_for_bytes(key, PARTITIONS)
                entries.setdefault((STORE, partition), []).append((key, value))
                truth[key] = value
            writer.write(
                entries,
                batch_id=batch_id,
                position=Position.from_map({"source": {0: batch_id}}),
                stores={STORE: PARTITIONS},
            )
    return truth


def contents(app: Application) -> dict[bytes, bytes]:
    result = app.query(StateQueryRequest.in_store(STORE).with_query(RangeQuery.with_no_bounds()))
    found: dict[bytes, bytes] = {}
    for answer in result.partition_results.values():
        assert answer.is_success, answer
        with answer.result as pairs:
            found.update(pairs)
    return found


def worker_pids() -> set[int]:
    """The reader worker processes this test process started (and has not reaped)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = next(line for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent.split()[1]) == os.getpid() and WORKER_MODULE.encode() in command:
            pids.add(int(entry.name))
    return pids


@contextmanager
def restoring(
    cluster: KafkaCluster, application_id: str, state_dir: Path, processes: int
) -> Iterator[tuple[Application, StandaloneReplicas]]:
    standalone = StandaloneReplicas(cluster, reader_processes=processes, max_records=2_000)
    app = Application(application_id, state_dir, cluster=standalone)
    app.key_value_store(STORE, PARTITIONS, engine="rocksdb", key_serde="bytes", value_serde="bytes")
    with app:
        yield app, standalone


def caught_up(standalone: StandaloneReplicas) -> Callable[[], bool]:
    def check() -> bool:
        lags = standalone.follower.lags()
        return len(lags) == PARTITIONS and not any(lags.values())

    return check


def expected(truth: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    return {key: value for key, value in truth.items() if value is not None}


def test_worker_processes_restore_every_key_then_keep_following(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    truth = write_batches(cluster, application_id, batches=20, keys=4_000)
    with restoring(cluster, application_id, tmp_path, processes=2) as (app, standalone):
        assert len(worker_pids()) == 2
        eventually(caught_up(standalone), "every partition restored", within=120.0)
        assert contents(app) == expected(truth)
        truth.update(write_batches(cluster, application_id, 3, 4_000, first_batch=20))
        # (lags count from the end offsets last asked for, so they cannot say this yet)
        eventually(lambda: contents(app) == expected(truth), "the new batches followed")
    assert worker_pids() == set(), "closing the application left reader workers running"


def test_a_worker_killed_mid_restore_is_replaced_and_the_restore_ends_true(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    truth = write_batches(cluster, application_id, batches=40, keys=20_000)
    with restoring(cluster, application_id, tmp_path, processes=2) as (app, standalone):
        eventually(lambda: standalone.follower.applied_records > 0, "the restore started")
        victim = min(worker_pids())
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: victim not in worker_pids(), "the killed worker reaped", within=60.0)
        eventually(caught_up(standalone), "every partition restored", within=120.0)
        assert contents(app) == expected(truth)
        assert len(worker_pids()) == 2, "the reader was not replaced by a new pair of workers"
    assert worker_pids() == set()


def test_a_worker_frozen_inside_a_frame_does_not_hold_up_the_follower(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    """A worker stopped (SIGSTOP: a debugger, a frozen host) while it writes a frame of
    thousands of records: `read` took what the pipe held and waited for the rest with no
    timeout, so the follower stopped following and the application's `close()` never
    returned. It returns within its timeout now, and once the worker goes on, the frame
    arrives whole: every record is read, once."""
    application_id = unique_name("app")
    topics = ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    write_batches(cluster, application_id, batches=20, keys=20_000)  # 10,000 puts a batch
    reader = ProcessChangelogConsumer(cluster, processes=1, max_records=20_000)
    try:
        for partition in range(PARTITIONS):
            reader.assign(TopicPartition(topics[STORE], partition), 0)
        (worker,) = eventually(worker_pids, "the worker started")
        time.sleep(3)  # it has read 20,000 records, and blocks writing their frame to the pipe
        os.kill(worker, signal.SIGSTOP)
        try:
            reading = threading.Thread(target=reader.read, args=(0.1,))
            reading.start()
            reading.join(10)
            assert not reading.is_alive(), "read() waits for a frozen worker's frame"
        finally:
            os.kill(worker, signal.SIGCONT)
        records = 0
        deadline = time.monotonic() + 60
        while records < 200_000 and time.monotonic() < deadline:
            records += sum(
                len(event.pairs) for event in reader.read(0.5) if isinstance(event, ChangelogUnit)
            )
        assert records == 200_000
    finally:
        reader.close()


FOLLOWER_PROCESS = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from iqstate_kafka import KafkaCluster
from test_reader_processes import restoring, worker_pids
cluster = KafkaCluster(sys.argv[1], timeout=10.0)
with restoring(cluster, sys.argv[2], Path(sys.argv[3]), processes=2):
    while len(worker_pids()) < 2:
        time.sleep(0.01)
    print(*sorted(worker_pids()), flush=True)
    time.sleep(600)
"""


def test_workers_end_when_their_follower_is_killed(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A follower killed with SIGKILL closes nothing: its workers see their commands end
    and exit, rather than read on for nobody."""
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    write_batches(cluster, application_id, batches=2, keys=100)
    here = str(Path(__file__).parent)
    follower = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER_PROCESS, cluster.bootstrap_servers, application_id,
         str(tmp_path), here],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        workers = {int(pid) for pid in follower.stdout.readline().split()}
        assert len(workers) == 2
        follower.kill()
        follower.wait()
        eventually(lambda: not any(_running(pid) for pid in workers), "the workers ended")
    finally:
        follower.kill()
        follower.wait()


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def test_a_cluster_setting_makes_an_applications_follower_read_in_workers(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """`KafkaCluster(reader_processes=N)` is how an application (membership and all) turns
    the worker processes on; it restores every key through them."""
    application_id = unique_name("app")
    ensure_changelog_topics(cluster, application_id, {STORE: PARTITIONS})
    truth = write_batches(cluster, application_id, batches=4, keys=2_000)
    app = Application(
        application_id,
        tmp_path,
        application_server="127.0.0.1:1",
        cluster=KafkaCluster(cluster.bootstrap_servers, timeout=10.0, reader_processes=2),
    )
    app.key_value_store(STORE, PARTITIONS, engine="rocksdb", key_serde="bytes", value_serde="bytes")
    every_key = expected(truth)

    def restored() -> bool:
        result = app.query(
            StateQueryRequest.in_store(STORE).with_query(RangeQuery.with_no_bounds())
        )
        found: dict[bytes, bytes] = {}
        for answer in result.partition_results.values():
            if not answer.is_success:  # not active here yet
                return False
            with answer.result as pairs:
                found.update(pairs)
        return found == every_key

    with app:
        eventually(lambda: len(worker_pids()) == 2, "two reader workers")
        eventually(restored, "every key restored", within=120.0)
    assert worker_pids() == set()
