"""Damaged files, for every persistent engine: a clear error or correct data, nothing else.

Each engine's store is filled with a few commits (data, changelog offset and position move
together), once closed cleanly and once killed after its last commit (RocksDB's WAL and
SQLite's `-wal` file then still hold commits). Then each of its files is deleted,
truncated to half, emptied, or overwritten with random bytes at several offsets in its
middle, and a separate process opens the store and reads everything back: offsets,
position, both full scans and every key. The case passes when that process survives and
every answer is either `CorruptStateError` naming the store's directory, or exactly the
data, offset and position of one commit: the last one, or, when only a log of commits
(RocksDB's WAL, SQLite's `-wal` file) lost its tail or vanished, an earlier one, which the
runtime then reports as a gap before the next batch.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ENGINES = {
    "rocksdb": ("iqstate_rocksdb", "RocksDBKeyValueStore", "rocksdb"),
    "lmdb": ("iqstate_lmdb", "LMDBKeyValueStore", "lmdb"),
    "sqlite": ("iqstate_sqlite", "SQLiteKeyValueStore", "sqlite"),
}
COMMITS = 4
KEYS = 3000
OFFSETS = (0.2, 0.35, 0.5, 0.65, 0.8)
LOGS = (".log", "-wal")
"""Files holding a log of the latest commits: losing their tail loses only those commits."""


def expected_state(commit: int) -> dict[bytes, bytes]:
    """The data after `commit` commits: each rewrites about half the keys, deletes a few."""
    rng = random.Random(11)
    state: dict[bytes, bytes] = {}
    for number in range(1, commit + 1):
        for i in range(KEYS):
            if number == 1 or rng.random() < 0.5:
                state[b"key-%06d" % i] = rng.randbytes(100)
        for i in range(0, KEYS, 37):
            if number > 1 and rng.random() < 0.5:
                state.pop(b"key-%06d" % i, None)
    return state


CHILD_PRELUDE = """
import json, os, sys
from importlib import import_module
from pathlib import Path
from iqstate import Position, TopicPartition
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.testing import make_context
sys.path.insert(0, {tests!r})
from test_corruption import COMMITS, ENGINES, KEYS, expected_state
module, name, _ = ENGINES[{engine!r}]
store = getattr(import_module(module), name)("s")
context = make_context(
    Path({root!r}), "s", processing_guarantee="at_least_once",
    query_handlers=QueryHandlerRegistry(),
)
TP = TopicPartition("corruption-changelog", 0)
"""

FILL = """
store.init(context)
previous = {{}}
for number in range(1, COMMITS + 1):
    state = expected_state(number)
    changes = [(k, v) for k, v in state.items() if previous.get(k) != v]
    store.put_all(changes + [(k, None) for k in previous if k not in state])
    store.update_position(Position.from_map({{"src": {{0: number}}}}))
    store.commit({{TP: number}})
    previous = state
if {killed!r}:
    os._exit(0)
store.close()
"""

READ = """
def failure(error):
    return {"error": type(error).__name__, "message": str(error)}
def attempt(read):
    try:
        return {"value": read()}
    except Exception as error:
        return failure(error)
try:
    store.init(context)
except Exception as error:
    print(json.dumps({"open": failure(error)}))
    sys.exit(0)
position = store.position
answers = {
    "offset": store.committed_offset(TP),
    "position": position.partition_offsets("src").get(0) if "src" in position.topics() else None,
    "all": attempt(lambda: [[k.hex(), v.hex()] for k, v in store.all()]),
    "reverse": attempt(lambda: [[k.hex(), v.hex()] for k, v in store.reverse_all()]),
    "gets": {},
}
for i in range(KEYS + 5):
    key = b"key-%06d" % i
    answers["gets"][key.hex()] = attempt(lambda: (lambda v: v and v.hex())(store.get(key)))
print(json.dumps(answers))
"""


def run_child(engine: str, root: Path, body: str) -> subprocess.CompletedProcess[str]:
    prelude = CHILD_PRELUDE.format(tests=str(Path(__file__).parent), engine=engine, root=str(root))
    return subprocess.run(
        [sys.executable, "-c", prelude + body], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    """One filled state directory per engine, closed cleanly and killed after committing."""
    built = {}
    for engine in ENGINES:
        for killed in (False, True):
            root = tmp_path_factory.mktemp(f"{engine}-{'killed' if killed else 'closed'}")
            child = run_child(engine, root, FILL.format(killed=killed))
            assert child.returncode == 0, child.stderr
            built[(engine, killed)] = root
    return built


@dataclass(frozen=True)
class Damage:
    """One way of damaging one file: `kind` is delete, truncate, empty or overwrite."""

    kind: str
    offset: float = 0.0

    def apply(self, path: Path) -> None:
        if self.kind == "delete":
            path.unlink()
        elif self.kind in ("truncate", "empty"):
            os.truncate(path, path.stat().st_size // 2 if self.kind == "truncate" else 0)
        else:
            size = path.stat().st_size
            with path.open("r+b") as handle:
                handle.seek(int(size * self.offset))
                handle.write(random.Random(f"{path.name}@{self.offset}").randbytes(64))

    def __str__(self) -> str:
        return f"{self.kind}@{self.offset}" if self.kind == "overwrite" else self.kind


DAMAGES = [Damage("delete"), Damage("truncate"), Damage("empty")] + [
    Damage("overwrite", offset) for offset in OFFSETS
]


def judge(answers: dict[str, Any], directory: Path, older_allowed: bool) -> list[str]:
    """What is wrong with the answers of one damaged store (nothing, when it passes)."""
    problems: list[str] = []

    def clear(failure: dict[str, str], what: str) -> None:
        if failure["error"] != "CorruptStateError" or str(directory) not in failure["message"]:
            problems.append(f"{what}: {failure['error']}: {failure['message'][:300]}")

    if "open" in answers:
        clear(answers["open"], "open")
        return problems
    commit = answers["offset"] or 0
    if not older_allowed and commit != COMMITS:
        problems.append(f"opened at commit {commit} of {COMMITS} without an error")
    if answers["position"] != answers["offset"]:
        problems.append(f"position {answers['position']} with offset {answers['offset']}")
    state = expected_state(commit)
    ordered = [[k.hex(), v.hex()] for k, v in sorted(state.items())]
    for scan, expected in (("all", ordered), ("reverse", ordered[::-1])):
        if "error" in answers[scan]:
            clear(answers[scan], scan)
        elif answers[scan]["value"] != expected:
            problems.append(f"{scan}: {len(answers[scan]['value'])} pairs served as success")
    wrong = 0
    for key, answer in answers["gets"].items():
        if "error" in answer:
            clear(answer, f"get {key}")
        elif answer["value"] != (v.hex() if (v := state.get(bytes.fromhex(key))) else None):
            wrong += 1
    if wrong:
        problems.append(f"{wrong} key lookups answered wrongly as success")
    return problems[:5]


def cases() -> list[Any]:
    """(engine, killed, file kind, damage) for the files each engine writes."""
    kinds = {
        "rocksdb": ["*.sst", "*.log", "MANIFEST-*", "CURRENT", "OPTIONS-*", "IDENTITY", "LOG"],
        "lmdb": ["data.mdb", "lock.mdb"],
        "sqlite": ["store.db", "store.db-wal", "store.db-shm"],
    }
    return [
        pytest.param(engine, killed, pattern, damage, id=f"{engine}-{state}-{pattern}-{damage}")
        for engine, patterns in kinds.items()
        for killed, state in ((False, "closed"), (True, "killed"))
        for pattern in patterns
        for damage in DAMAGES
    ]


@pytest.mark.parametrize(("engine", "killed", "pattern", "damage"), cases())
def test_damage_ends_in_a_clear_error_or_correct_data(
    pristine: dict[tuple[str, bool], Path],
    tmp_path: Path,
    engine: str,
    killed: bool,
    pattern: str,
    damage: Damage,
) -> None:
    root = tmp_path / "state"
    shutil.copytree(pristine[(engine, killed)], root)
    directory = root / "s" / "0" / ENGINES[engine][2]
    targets = sorted(path for path in directory.glob(pattern) if path.is_file())
    if not targets:
        pytest.skip(f"the {engine} store holds no {pattern} file in this state")
    if damage.kind != "delete" and not any(path.stat().st_size for path in targets):
        pytest.skip(f"the {engine} store's {pattern} files are empty in this state")
    for path in targets:
        damage.apply(path)
    child = run_child(engine, root, READ)
    assert child.returncode == 0, f"the reading process died: {child.stderr[-3000:]}"
    older_allowed = any(pattern.endswith(log) for log in LOGS)
    assert judge(json.loads(child.stdout), directory, older_allowed) == []
