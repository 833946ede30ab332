"""`iqstate_spark.run_until_stopped` in a script as a user runs it: Ctrl-C (SIGINT to its
process group, as a terminal sends it) after the first batch stops the query quietly, the
script goes on to read its store, and a restart continues where it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_demo import noise

SCRIPT = """
import sys
from pathlib import Path

import iqstate_spark
from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate_spark.session import local_session
from pyspark.sql import functions as F

spark = local_session("run-until-stopped")
inbox = Path("inbox").absolute()
inbox.mkdir(exist_ok=True)
(inbox / f"{sys.argv[1]}.txt").write_text("spark streams state\\nspark queries state\\n")
app = Application("word-count", state_dir="state")
app.key_value_store("word-counts", partitions=2, engine="rocksdb", value_serde="int64")
app.start()
words = spark.readStream.text(str(inbox)).select(F.explode(F.split("value", " ")).alias("word"))
query = (
    words.groupBy("word").count().writeStream.outputMode("update")
    .option("checkpointLocation", str(Path("checkpoint").absolute()))
    .foreachBatch(iqstate_spark.to_store(app, "word-counts", key="word", value="count"))
    .start()
)
query.processAllAvailable()
print("batch written", flush=True)
iqstate_spark.run_until_stopped(query)
spark_count = app.query(
    StateQueryRequest.in_store("word-counts").with_query(KeyQuery.with_key("spark"))
).only_partition_result()
print("stopped; spark =", spark_count.result, flush=True)
app.close()
"""


def run_until_ctrl_c(folder: Path, file_name: str) -> tuple[str, Path]:
    stderr = folder / f"{file_name}.err"
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "job.py", file_name],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "batch written\n", stderr.read_text()[-3000:]
        time.sleep(2)  # the script's next line installs the handler: Ctrl-C before it is Spark's
        os.killpg(process.pid, signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    assert process.returncode == 0, rest + stderr.read_text()[-3000:]
    return rest, stderr


def test_ctrl_c_stops_the_query_quietly_and_a_restart_continues(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    first, first_errors = run_until_ctrl_c(tmp_path, "1")
    assert first == "stopped; spark = 2\n"
    assert noise(first_errors) == [], "no Java or Python traces on Ctrl-C"
    second, second_errors = run_until_ctrl_c(tmp_path, "2")  # one more file: the count grows
    assert second == "stopped; spark = 4\n"
    assert noise(second_errors) == []
