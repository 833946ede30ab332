"""A machine that refuses a write is not damage: every persistent engine reports a full
disk (or a file size limit) as `StateStorageError`, keeps its last commit, and carries on
once the cause is gone. So do files this process may not use (permissions).

Writes fail for real: in a process of its own under a file size limit (`RLIMIT_FSIZE`, any
user), and, where this process may mount one, on a 3 MB tmpfs that fills up (`ENOSPC`),
then grows. Permissions are checked for real too, as root without the capabilities that
let root ignore them (`setpriv`). A user checks afterwards that every committed batch is
there, that the application starts, and that the next batch commits."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iqstate import (
    Application,
    CorruptStateError,
    InMemoryChangelog,
    RangeQuery,
    StateQueryRequest,
    StateStorageError,
)

ENGINES = ("rocksdb", "lmdb", "sqlite")
ROWS = 500

WRITER = """
import json, resource, signal, sys
from pathlib import Path
from iqstate import Application

engine, directory, limit = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
ROWS = int(sys.argv[4])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
app = Application("full", directory)
app.key_value_store("s", 1, engine=engine)
app.start()
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
last, failure = None, None
for batch_id in range(10_000):
    try:
        with app.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id) as batch:
            batch.put_all("s", [(f"k{batch_id}-{i}", "x" * 100) for i in range(ROWS)])
    except Exception as exc:
        failure = (type(exc).__name__, str(exc))
        break
    last = batch_id
try:
    app.close()
except Exception:
    pass  # closing marks the store closed: that write may fail too
print(json.dumps({"last": last, "failure": failure}))
"""


def write_until_refused(engine: str, directory: Path, limit: int = 0) -> tuple[int, list[str]]:
    """Batches into a fresh store until a write fails: the last committed batch id, and the
    failure's type and message."""
    script = directory.parent / "writer.py"
    script.write_text(WRITER)
    finished = subprocess.run(
        [sys.executable, str(script), engine, str(directory), str(limit), str(ROWS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    outcome = json.loads(finished.stdout.splitlines()[-1])
    assert outcome["failure"] is not None, "no write failed"
    assert outcome["last"] is not None, outcome["failure"]
    return outcome["last"], outcome["failure"]


def check_everything_committed_is_there(engine: str, directory: Path, last: int) -> None:
    """What a user checks: every batch up to `last` is there, whole, at its position, and
    the next batch commits."""
    app = Application("full", directory)
    app.key_value_store("s", 1, engine=engine)
    with app:
        result = app.query(
            StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds())
        ).only_partition_result()
        assert result is not None
        with result.result as rows:
            keys = {key for key, _ in rows}
        assert keys == {f"k{b}-{i}" for b in range(last + 1) for i in range(ROWS)}
        assert result.position.to_map() == {"src": {0: last}}
        with app.begin_batch(position={"src": {0: last + 1}}, batch_id=last + 1) as batch:
            batch.put("s", "after", "the cause is gone")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_file_size_limit_is_a_storage_error_and_nothing_committed_is_lost(
    engine: str, tmp_path: Path
) -> None:
    directory = tmp_path / "state"
    last, (kind, message) = write_until_refused(engine, directory, limit=2_000_000)
    assert kind == "StateStorageError", message
    assert str(directory) in message and "nothing committed is lost" in message
    check_everything_committed_is_there(engine, directory, last)


def start_on_full_disk(engine: str, directory: Path) -> None:
    """Start (and close) the store on a full disk: it may refuse, as the machine's failure,
    never as damage."""
    app = Application("full", directory)
    app.key_value_store("s", 1, engine=engine)
    try:
        app.start()
    except CorruptStateError as exc:
        pytest.fail(f"a full disk was called damage: {exc}")
    except StateStorageError:
        pass
    finally:
        with contextlib.suppress(StateStorageError):
            app.close()


@contextlib.contextmanager
def small_tmpfs(mount_point: Path) -> Iterator[None]:
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_full_disk_is_a_storage_error_not_damage(engine: str, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        directory = disk / "state"
        last, (kind, message) = write_until_refused(engine, directory)
        assert kind == "StateStorageError", message
        assert "full" in message and "nothing committed is lost" in message
        # Starting on the still-full disk is refused the same way, never as damage (which
        # would set a store with a changelog aside and rebuild it onto the full disk).
        start_on_full_disk(engine, directory)
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        check_everything_committed_is_there(engine, directory, last)


def fill(disk: Path) -> None:
    """Fill `disk` to the last byte with a file of no use."""
    with (disk / "filler").open("wb") as filler:
        with contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("engine", ENGINES)
def test_starting_on_a_full_disk_keeps_a_clean_store_where_it_is(
    engine: str, tmp_path: Path
) -> None:
    # A cleanly closed store must write to open (SQLite its shared-memory file, RocksDB a
    # new log): on a full disk that is the machine's failure, never damage to set aside.
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        directory = disk / "state"
        app = Application("full", directory)
        app.key_value_store("s", 1, engine=engine)
        with app:
            with app.begin_batch(position={"src": {0: 0}}, batch_id=0) as batch:
                batch.put_all("s", [(f"k0-{i}", "x" * 100) for i in range(ROWS)])
        fill(disk)
        start_on_full_disk(engine, directory)
        assert not list(directory.rglob("*untrusted*")), "nothing is set aside"
        (disk / "filler").unlink()
        check_everything_committed_is_there(engine, directory, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_after_a_full_disk_every_partition_closes_and_the_process_starts_again(
    tmp_path: Path,
) -> None:
    # One partition's close failing (its clean-close mark) must not leave the others open,
    # holding their locks: the same process starts the application again once there is room.
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        directory = disk / "state"
        app = Application("full", directory)
        app.key_value_store("s", 4, engine="rocksdb")
        app.start()
        last = -1
        with contextlib.suppress(StateStorageError):
            for batch_id in range(10_000):
                with app.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id) as b:
                    b.put_all("s", [(f"k{batch_id}-{i}", "x" * 100) for i in range(ROWS)])
                last = batch_id
        with contextlib.suppress(StateStorageError):
            app.close()
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        reopened = Application("full", directory)
        reopened.key_value_store("s", 4, engine="rocksdb")
        with reopened:  # no partition's lock is still held by the first
            assert reopened.query(
                StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds())
            ).position.to_map() == ({"src": {0: last}} if last >= 0 else {})


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_state_directory_on_a_full_disk_is_not_left_locked(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        fill(disk)
        app = Application("full", disk / "state")
        app.key_value_store("s", 1)
        with pytest.raises(StateStorageError, match="state directory"):
            app.start()
        (disk / "filler").unlink()
        again = Application("full", disk / "state")
        again.key_value_store("s", 1)
        with again:  # the failed start gave its lock back
            assert again.state.name == "RUNNING"


OPENER = """
import json, sys
from pathlib import Path
from iqstate import Application, InMemoryChangelog
engine, directory = sys.argv[1], Path(sys.argv[2])
# With a changelog, a store called damaged is set aside and rebuilt (here: empty).
app = Application("full", directory, changelog=InMemoryChangelog())
app.key_value_store("s", 1, engine=engine, logging=True)
try:
    app.start()
    failure = None
except Exception as exc:
    failure = [type(exc).__name__, str(exc)]
else:
    app.close()
print(json.dumps(failure))
"""

WITHOUT_ROOTS_PRIVILEGE = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
    "--",
]
"""Run a command as root without the capabilities that let root ignore file permissions."""

DATABASE_FILES = {"rocksdb": "CURRENT", "lmdb": "data.mdb", "sqlite": "store.db"}


def start_refused(engine: str, directory: Path) -> list[str]:
    """Start the store in a process held to file permissions: its failure's type, message."""
    finished = subprocess.run(
        [*WITHOUT_ROOTS_PRIVILEGE, sys.executable, "-c", OPENER, engine, str(directory)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    failure: list[str] | None = json.loads(finished.stdout.splitlines()[-1])
    assert failure is not None, "the store opened in spite of its permissions"
    return failure


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="dropping root's file capabilities needs root and setpriv (util-linux)",
)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("refused", ["database file", "partition directory", "store directory"])
def test_files_this_process_may_not_use_are_a_storage_error_not_damage(
    engine: str, refused: str, tmp_path: Path
) -> None:
    directory = tmp_path / "state"
    app = Application("full", directory, changelog=InMemoryChangelog())
    app.key_value_store("s", 1, engine=engine, logging=True)
    with app:
        with app.begin_batch(position={"src": {0: 0}}, batch_id=0) as batch:
            batch.put_all("s", [(f"k0-{i}", "x" * 100) for i in range(ROWS)])
    (engine_directory,) = directory.glob(f"*/s/0/{engine}")
    target = {
        "database file": engine_directory / DATABASE_FILES[engine],
        "partition directory": engine_directory.parent,
        "store directory": engine_directory.parent.parent,  # its store.json, say
    }[refused]
    mode = target.stat().st_mode
    target.chmod(0)
    try:
        kind, message = start_refused(engine, directory)
    finally:
        target.chmod(mode)
    # Damage would set the store aside and rebuild it; a permission is the operator's to fix.
    assert kind == "StateStorageError", message
    assert "may not" in message and "nothing committed is lost" in message
    assert not list(directory.rglob("*untrusted*")), "nothing is set aside"
    check_everything_committed_is_there(engine, directory, 0)


COMMITTER = """
import json, sys
from pathlib import Path
from iqstate import Application
app = Application("full", Path(sys.argv[1]))
app.key_value_store("s", 1, engine="lmdb")
app.start()
try:
    with app.begin_batch(position={"src": {0: 0}}, batch_id=0) as batch:
        batch.put_all("s", [(f"k0-{i}", "x" * 100) for i in range(int(sys.argv[2]))])
    failure = None
except Exception as exc:
    failure = [type(exc).__name__, str(exc)]
app.close()
print(json.dumps(failure))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="dropping root's file capabilities needs root and setpriv (util-linux)",
)
def test_a_record_of_committed_partitions_it_may_not_write_is_a_storage_error(
    tmp_path: Path,
) -> None:
    # A partition's first commit records it beside the store (committed-partitions.json).
    directory = tmp_path / "state"
    app = Application("full", directory)
    app.key_value_store("s", 1, engine="lmdb")
    with app:
        pass
    (store_directory,) = directory.glob("*/s")
    store_directory.chmod(0o555)
    try:
        finished = subprocess.run(
            [*WITHOUT_ROOTS_PRIVILEGE, sys.executable, "-c", COMMITTER, str(directory), str(ROWS)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        store_directory.chmod(0o755)
    assert finished.returncode == 0, finished.stderr[-3000:]
    kind, message = json.loads(finished.stdout.splitlines()[-1])
    assert kind == "StateStorageError" and "committed-partitions.json" in message, message
    # The batch's own commit came first: it is there, and the next one commits.
    check_everything_committed_is_there("lmdb", directory, 0)


def run_limited(script: str, engine: str, tmp_path: Path) -> dict[str, Any]:
    """Run `script` (which sets its own file size limit) on `engine` in a process of its
    own, in a directory under `tmp_path`; what it printed last, as JSON."""
    path = tmp_path / "limited.py"
    path.write_text(script)
    finished = subprocess.run(
        [sys.executable, str(path), engine, str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(finished.stdout.splitlines()[-1])
    return outcome


WINDOW_WRITER = """
import json, resource, signal, sys
from pathlib import Path
from iqstate import Position, StateStorageError
from iqstate.position import TopicPartition
from iqstate.testing.factory import make_context
from iqstate_lmdb.store import LMDBWindowStore
from iqstate_rocksdb.store import RocksDBWindowStore

engine, directory = sys.argv[1], Path(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
kind = {"rocksdb": RocksDBWindowStore, "lmdb": LMDBWindowStore}[engine]
store = kind("w", window_size_ms=10, retention_ms=1_000)
store.init(make_context(directory, "w", 0))
changelog = TopicPartition("app-w-changelog", 0)
store.update_position(Position.from_map({"src": {0: 1}}))
store.put(b"a", b"v1", 100)
store.commit({changelog: 1})
written = max(p.stat().st_size for p in directory.rglob("*") if p.is_file())
resource.setrlimit(resource.RLIMIT_FSIZE, (written + 65_536, resource.RLIM_INFINITY))
store.update_position(Position.from_map({"src": {0: 2}}))
store.put(b"b", b"x" * 4_000_000, 5_000)  # its time expires window 100
try:
    store.commit({changelog: 2})
    failed = None
except StateStorageError as exc:
    failed = str(exc)
after_failure = {
    "failed": failed,
    "position": store.position.to_map(),
    "keeps_100": store.keeps(100),
    "a": [value.decode() for _, value in store.fetch(b"a", 0, 1_000)],
}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
try:  # as a replica does after a failed commit: the store opened again from its files
    store.close()
except StateStorageError:
    pass  # its closing mark: RocksDB refuses every write after a failed one
store = kind("w", window_size_ms=10, retention_ms=1_000)
store.init(make_context(directory, "w", 0))
reopened = {"position": store.position.to_map(), "keeps_100": store.keeps(100)}
store.update_position(Position.from_map({"src": {0: 2}}))  # the same records, applied again
store.put(b"b", b"x" * 4_000_000, 5_000)
store.commit({changelog: 2})
retried = {
    "position": store.position.to_map(),
    "keeps_100": store.keeps(100),
    "a": [value.decode() for _, value in store.fetch(b"a", 0, 1_000)],
}
store.close()
print(json.dumps({"after_failure": after_failure, "reopened": reopened, "retried": retried}))
"""


@pytest.mark.parametrize("engine", ["rocksdb", "lmdb"])
def test_a_window_store_whose_commit_failed_is_as_it_committed_and_a_retry_applies(
    engine: str, tmp_path: Path
) -> None:
    """A replica's commit refused by a full disk (here a file size limit) is retried with
    the same records: until then the store answers at its last commit (position, stream
    time, windows), and the retry, on the store opened again, expires what the records
    expire, as on every replica."""
    outcome = run_limited(WINDOW_WRITER, engine, tmp_path)
    failure = outcome["after_failure"]
    assert failure["failed"] is not None, "the commit did not fail"
    assert failure["position"] == {"src": {"0": 1}}  # JSON's keys
    assert failure["keeps_100"] is True and failure["a"] == ["v1"]
    assert outcome["reopened"] == {"position": failure["position"], "keeps_100": True}
    retried = outcome["retried"]
    assert retried["position"] == {"src": {"0": 2}}
    assert retried["keeps_100"] is False and retried["a"] == []


REPLICA_WRITER = """
import json, resource, signal, sys
from pathlib import Path
from iqstate import Application, KeyQuery, Position, PositionBound, QueryConfig, StateStorageError
from iqstate.context import StateStoreContext
from iqstate.plugins import default_registry
from iqstate.position import TopicPartition
from iqstate.runtime import ACTIVE
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.hosted import HostedPartition

engine, root = sys.argv[1], Path(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
spec = Application("app", root).key_value_store("s", 1, engine=engine, value_serde="string")
directory = root / "app" / "s" / "0"
directory.mkdir(parents=True)
changelog = TopicPartition("app-s-changelog", 0)
context = StateStoreContext(
    application_id="app", store_name="s", partition=0, directory=directory,
    changelog_partition=changelog, query_handlers=default_registry().query_handlers,
)
hosted = HostedPartition(
    spec, 0, ACTIVE, context, CommittedPartitions(root / "app" / "s"), followed=True
)
hosted.open()

def unit(batch, value):
    return [(b"k", value.encode())], batch, Position.from_map({"in": {0: batch}})

def read():
    unbounded = PositionBound.unbounded()
    answer = hosted.chain.query(KeyQuery.with_key("k"), unbounded, QueryConfig.DEFAULT)
    return answer.result if answer.is_success else answer.failure_reason.name

hosted.apply_changelog(*unit(1, "first"), 2)
written = max(p.stat().st_size for p in directory.rglob("*") if p.is_file())
resource.setrlimit(resource.RLIMIT_FSIZE, (written + 65_536, resource.RLIM_INFINITY))
try:
    hosted.apply_changelog(*unit(2, "x" * 4_000_000), 4)
    failed = None
except StateStorageError as exc:
    failed = str(exc)
try:  # the follower's retry while the cause lasts: refused, the store still answers
    hosted.apply_changelog(*unit(2, "second"), 4)
    retry_refused = None
except Exception as exc:
    retry_refused = type(exc).__name__
after_failure = {
    "failed": failed,
    "retry_refused": retry_refused,
    "value": read(),
    "offset": hosted.committed_changelog_offset(),
}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
hosted.apply_changelog(*unit(2, "second"), 4)  # the follower's retry: the same unit
retried = {"value": read(), "offset": hosted.committed_changelog_offset(), "fence": hosted.fence}
hosted.close()
print(json.dumps({"after_failure": after_failure, "retried": retried}))
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_replica_whose_commit_failed_applies_the_retry_once_the_cause_is_gone(
    engine: str, tmp_path: Path
) -> None:
    """A serving instance retries a unit of changelog records whose commit a full disk
    refused (here a file size limit): the retry commits once the cause is gone, on every
    engine (RocksDB refuses every write after a failed one until it is opened again)."""
    outcome = run_limited(REPLICA_WRITER, engine, tmp_path)
    failure = outcome["after_failure"]
    assert failure["failed"] is not None, "the commit did not fail"
    assert failure["retry_refused"] is not None, "a retry while the disk is full"
    assert failure["value"] == "first" and failure["offset"] == 2
    assert outcome["retried"] == {"value": "second", "offset": 4, "fence": 2}
