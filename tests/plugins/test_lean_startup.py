"""Start-up stays lean: loading every installed plugin imports no engine library, HTTP
stack or Spark; those load when a store or command uses them (checked in fresh
interpreters, through `sys.modules`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = [
    "rocksdict",
    "lmdb",
    "uvicorn",
    "starlette",
    "httpx",
    "pyspark",
    "pyarrow",
    "numpy",
    "pandas",
    "confluent_kafka",
    "asyncio",
]

PROGRAM = """
import json, sys
from importlib import import_module
from importlib.metadata import entry_points

HEAVY = {heavy!r}
entry_modules = sorted({{ep.module for ep in entry_points(group="iqstate")}})
for module in entry_modules:
    import_module(module)

from iqstate import Application, KeyQuery, StateQueryRequest

app = Application("lean", {state_dir!r})
app.key_value_store("counts", 2)
{declare}
with app:
    with app.begin_batch() as batch:
        batch.put_all("counts", [("a", 1), ("b", 2)])
    request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("b"))
    answer = app.query(request).only_partition_result().result
print(json.dumps({{
    "entry_modules": entry_modules,
    "engines": sorted(app.plugins.engines),
    "commands": sorted(app.plugins.commands),
    "answer": answer,
    "loaded": [name for name in HEAVY if name in sys.modules],
}}))
"""


def start_in_fresh_interpreter(state_dir: Path, declare: str = "") -> dict[str, object]:
    program = PROGRAM.format(heavy=HEAVY, state_dir=str(state_dir), declare=declare)
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    report: dict[str, object] = json.loads(completed.stdout.splitlines()[-1])
    return report


def test_plugins_and_a_memory_store_import_no_heavy_module(tmp_path: Path) -> None:
    report = start_in_fresh_interpreter(tmp_path)
    assert report["answer"] == 2
    assert {"iqstate_rocksdb.plugin", "iqstate_lmdb.plugin", "iqstate_http.plugin"} <= set(
        report["entry_modules"]  # type: ignore[arg-type]
    )
    # Every plugin still registered what it provides ...
    assert {"memory", "rocksdb", "lmdb", "sqlite"} <= set(report["engines"])  # type: ignore[arg-type]
    assert "serve" in report["commands"]  # type: ignore[operator]
    # ... without importing what only a store or command of theirs needs.
    assert report["loaded"] == []


def test_a_store_of_an_engine_loads_only_that_engine(tmp_path: Path) -> None:
    report = start_in_fresh_interpreter(
        tmp_path, declare='app.key_value_store("on_disk", 1, engine="lmdb")'
    )
    assert report["answer"] == 2
    assert report["loaded"] == ["lmdb"]
