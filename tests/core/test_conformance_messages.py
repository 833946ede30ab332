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
