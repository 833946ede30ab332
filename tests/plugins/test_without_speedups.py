"""Without iqstate-speedups' compiled paths (a machine with no C compiler), iqstate writes
the same bytes and reads what the compiled paths wrote: the two are one format."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iqstate import Application, KeyQuery, Serdes, StateQueryRequest, sealing

VALUES: list[Any] = [
    {"user": "u1", "score": 0.1, "tiny": 1e-7, "big": 2**70, "text": "é\n\x00😀"},
    [1, 2.5, None, True, {"nested": [1e16, -0.0]}],
    "plain",
]

WITHOUT_SPEEDUPS = """
import sys
sys.modules["iqstate_speedups.json_writer"] = None  # as if it had not been built
sys.modules["iqstate_speedups.sealing"] = None
import json
import pickle
from iqstate import Application, KeyQuery, RangeQuery, Serdes, StateQueryRequest, sealing

assert not sealing.COMPILED
values = json.loads(sys.argv[2])
shipped = pickle.loads(bytes.fromhex(sys.argv[3]))  # a serde pickled where it was compiled
app = Application("shared", sys.argv[1])
app.key_value_store("s", 1, engine="lmdb")
app.start()
read = [
    app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(f"k{i}")))
    .only_partition_result().result
    for i in range(len(values))
]
with app.query(
    StateQueryRequest.in_store("s").with_query(RangeQuery.with_range("k0", "k9"))
).partition_results[0].result as rows:
    ranged = [value for _, value in rows]
with app.begin_batch() as batch:
    batch.put_all("s", [(f"python{i}", value) for i, value in enumerate(values)])
app.close()
print(json.dumps({
    "json": [Serdes.json().serialize(value).hex() for value in values],
    "shipped": [shipped.serialize(value).hex() for value in values],
    "seal": sealing.seal(b"key", b"value").hex(),
    "read": read,
    "ranged": ranged,
}))
"""


@pytest.mark.skipif(not sealing.COMPILED, reason="iqstate-speedups is not built here")
def test_the_python_paths_write_and_read_what_the_compiled_ones_do(tmp_path: Path) -> None:
    directory = tmp_path / "app"
    app = Application("shared", directory)
    app.key_value_store("s", 1, engine="lmdb")
    app.start()
    with app.begin_batch() as batch:
        batch.put_all("s", [(f"k{i}", value) for i, value in enumerate(VALUES)])
    app.close()

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_SPEEDUPS,
            str(directory),
            json.dumps(VALUES),
            pickle.dumps(Serdes.json()).hex(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen["json"] == [Serdes.json().serialize(value).hex() for value in VALUES]
    assert seen["shipped"] == seen["json"], "a pickled serde works where it cannot compile"
    assert seen["seal"] == sealing.seal(b"key", b"value").hex()
    assert seen["read"] == seen["ranged"] == json.loads(json.dumps(VALUES))

    app = Application("shared", directory)
    app.key_value_store("s", 1, engine="lmdb")
    app.start()
    written_by_python = [
        app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(f"python{i}")))
        .only_partition_result()
        .result
        for i in range(len(VALUES))
    ]
    app.close()
    assert written_by_python == json.loads(json.dumps(VALUES))
