"""Start-up cost: what `Application(...).start()` adds over `import iqstate`.

Every run is a fresh interpreter, with every plugin of the workspace installed:

* `import`: `import iqstate` alone (RSS after it, and its time);
* `start`: `import iqstate`, then `Application(...)`, one memory key-value store and
  `start()` (RSS after each step, and the time from `Application(...)` to started);
* `builtins`: the same with `IQSTATE_DISABLE_PLUGIN_AUTOLOAD=1`, the floor where no
  installed plugin is loaded;
* `eager`: as `start`, after importing the modules the plugins' entry modules imported
  before start-up was made lazy (their stores, the HTTP stack, the Spark sink): the
  previous design, measured in the same run.

The three kinds of run alternate, repeated `--repeat` times; medians are printed with the
range. The target (issue 13): `start()` with one memory store adds < 15 MB RSS over
`import iqstate`.

    python bench/startup.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points

TARGET_MB = 15.0
HEAVY = ["rocksdict", "lmdb", "uvicorn", "starlette", "httpx", "pyspark", "pyarrow", "numpy",
         "pandas", "confluent_kafka", "sqlite3", "asyncio"]  # fmt: skip

EAGER_BEFORE = ["iqstate_rocksdb.store", "iqstate_lmdb.store", "iqstate_sqlite.store",
                "iqstate_http.client", "iqstate_http.server", "iqstate_http.service",
                "iqstate_spark.sink", "iqstate_spark.offsets"]  # fmt: skip
"""What loading the plugins imported before their entry modules were made lazy."""

PROGRAM = """
import json, sys, time

def rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")

figures = {"python_mb": rss_mb()}
began = time.perf_counter()
import iqstate
figures["import_s"] = time.perf_counter() - began
figures["import_mb"] = rss_mb()
if sys.argv[1] != "import":
    began = time.perf_counter()
    if sys.argv[1] == "eager":
        for module in EAGER_BEFORE:
            __import__(module)
    app = iqstate.Application("startup", sys.argv[2])
    app.key_value_store("counts", 1)
    app.start()
    figures["start_s"] = time.perf_counter() - began
    figures["start_mb"] = rss_mb()
    app.close()
figures["heavy"] = [name for name in HEAVY if name in sys.modules]
print(json.dumps(figures))
"""


def run(kind: str, state_dir: str) -> dict[str, float | list[str]]:
    env = dict(os.environ)
    env.pop("IQSTATE_BLOCK_PLUGINS", None)
    env.pop("IQSTATE_DISABLE_PLUGIN_AUTOLOAD", None)
    if kind == "builtins":
        env["IQSTATE_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    program = f"HEAVY = {HEAVY!r}\nEAGER_BEFORE = {EAGER_BEFORE!r}\n{PROGRAM}"
    completed = subprocess.run(
        [sys.executable, "-c", program, kind, state_dir],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise SystemExit(f"the {kind} run failed:\n{completed.stderr}")
    figures: dict[str, float | list[str]] = json.loads(completed.stdout)
    return figures


def summary(values: list[float], unit: str, scale: float = 1.0, digits: int = 1) -> str:
    scaled = [value * scale for value in values]
    middle, low, high = statistics.median(scaled), min(scaled), max(scaled)
    return f"{middle:7.{digits}f} {unit}  (range {low:.{digits}f}-{high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    plugins = sorted(f"{ep.name} ({ep.value})" for ep in entry_points(group="iqstate"))
    print("installed plugins:", ", ".join(plugins))
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a shared machine)")
    runs: dict[str, list[dict[str, float | list[str]]]] = {
        "import": [],
        "start": [],
        "builtins": [],
        "eager": [],
    }
    with tempfile.TemporaryDirectory() as root:
        for round_number in range(args.repeat):
            for kind in runs:  # alternate the kinds within each round
                runs[kind].append(run(kind, os.path.join(root, f"{kind}-{round_number}")))

    def column(kind: str, name: str) -> list[float]:
        return [float(figures[name]) for figures in runs[kind]]  # type: ignore[arg-type]

    def paired(kind: str) -> list[tuple[float, float]]:
        """(RSS after start, RSS after import) of each run of `kind`."""
        return list(zip(column(kind, "start_mb"), column(kind, "import_mb"), strict=True))

    print(f"\n{args.repeat} fresh interpreters per kind, medians (range):")
    print(f"  python itself                    {summary(column('import', 'python_mb'), 'MB')}")
    print(f"  after import iqstate             {summary(column('import', 'import_mb'), 'MB')}")
    print(f"  import iqstate time              {summary(column('import', 'import_s'), 'ms', 1e3)}")
    for kind, label in (
        ("start", "every plugin"),
        ("builtins", "built-ins only"),
        ("eager", "every plugin, imported eagerly as before"),
    ):
        added = [started - imported for started, imported in paired(kind)]
        ratio = [started / imported for started, imported in paired(kind)]
        heavy = sorted({name for figures in runs[kind] for name in figures["heavy"]})  # type: ignore[union-attr]
        print(f"  {label}:")
        print(f"    after start()                  {summary(column(kind, 'start_mb'), 'MB')}")
        print(f"    added over import iqstate      {summary(added, 'MB')}")
        print(f"    RSS after start / after import {summary(ratio, 'x', digits=2)}")
        print(f"    Application(...) to started    {summary(column(kind, 'start_s'), 'ms', 1e3)}")
        print(f"    heavy modules loaded           {', '.join(heavy) or 'none'}")
    added_mb = statistics.median(started - imported for started, imported in paired("start"))
    verdict = "met" if added_mb < TARGET_MB else "NOT met"
    print(f"\ntarget: start() adds < {TARGET_MB:.0f} MB over import iqstate: {verdict} "
          f"({added_mb:.1f} MB with every plugin)")  # fmt: skip


if __name__ == "__main__":
    main()
