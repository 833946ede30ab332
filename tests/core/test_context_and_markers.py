"""StateStoreContext registration (KIP-796 commit callbacks) and the pytest11 marker plugin."""

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from iqstate import IqstateError, StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore


def test_commit_callbacks_run_after_commit() -> None:
    context = StateStoreContext(
        application_id="a", store_name="s", partition=1, directory=Path("/tmp/x")
    )
    store = MemoryKeyValueStore("s")
    calls: list[str] = []
    context.register(store, lambda: calls.append("committed"))
    with pytest.raises(IqstateError, match="already registered"):
        context.register(store)
    context.run_commit_callbacks()
    assert calls == ["committed"]


def test_context_validates_and_freezes_config() -> None:
    with pytest.raises(ValueError, match="processing_guarantee"):
        StateStoreContext(
            application_id="a",
            store_name="s",
            partition=0,
            processing_guarantee="maybe_once",  # type: ignore[arg-type]
        )
    context = StateStoreContext(
        application_id="a", store_name="s", partition=0, config={"block_cache_mb": 64}
    )
    with pytest.raises(TypeError):
        context.config["block_cache_mb"] = 1  # type: ignore[index]


def test_pytest11_entry_point_only_registers_markers(tmp_path: Path) -> None:
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("iqstate") == "iqstate.pytest_plugin"
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n@pytest.mark.iqstate_conformance\ndef test_x():\n    pass\n"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--strict-markers", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 passed" in completed.stdout
