"""What the conformance suite tells an engine author who left something out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FORGOT_WINDOW = """
import pytest
from iqstate.engines.memory import MEMORY_ENGINE
from iqstate.testing import StoreConformance, StoreFactory


class TestForgotWindow(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(MEMORY_ENGINE)
"""


def test_an_engine_with_window_stores_left_unchecked_is_told_how_to_check_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_forgot.py").write_text(FORGOT_WINDOW)
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "window"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "set window = True on the test class" in finished.stdout
    assert "store does not provide window stores" not in finished.stdout


SYNC_AND_OPTIONS = """
from typing import Any

import pytest
from iqstate.context import StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.testing import StoreConformance, StoreFactory


class BrokenWhenSynced(MemoryKeyValueStore):
    # A store whose durable commit path is broken, and which needs one of its options.
    def init(self, context: StateStoreContext) -> None:
        if context.config.get("required_option") != "set":
            raise ValueError(f"required_option is missing from {dict(context.config)}")
        super().init(context)
        self.syncs = context.sync_commits

    def commit(self, changelog_offsets: Any) -> None:
        if self.syncs:
            raise OSError("fsync path broken")
        super().commit(changelog_offsets)


class TestBrokenWhenSynced(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory(key_value=BrokenWhenSynced)

    @pytest.fixture
    def store_config(self) -> dict[str, Any]:
        return {"required_option": "set"}
"""


def test_the_suite_runs_with_the_engine_options_and_with_durable_commits(tmp_path: Path) -> None:
    """Every store of the suite opens with the options the test class gives, and each test
    runs with commits durable and not (the state machine draws it at each reopen): a store
    broken only on the durable path fails."""
    (tmp_path / "test_sync.py").write_text(SYNC_AND_OPTIONS)
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "-p",
         "no:randomly", "-k", "put_get_delete or test_reopen or test_state_machine"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = finished.stdout
    assert finished.returncode == 1, report + finished.stderr
    failed = {line.split()[1] for line in report.splitlines() if line.startswith("FAILED")}
    assert failed == {
        "test_sync.py::TestBrokenWhenSynced::test_put_get_delete[sync-committed]",
        "test_sync.py::TestBrokenWhenSynced::test_reopen[sync]",
        "test_sync.py::TestBrokenWhenSynced::test_state_machine",  # it reopened synced
    }, report
    assert "fsync path broken" in report
    assert "3 failed, 4 passed" in report, report  # so every store got its option
