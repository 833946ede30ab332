"""iqstate's pytest plugin gives plugin projects `--hypothesis-profile=long`, and that
profile lengthens the conformance suite's state machines."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from iqstate.testing.conformance import state_machine_settings

CHECK_PROFILE = """
from hypothesis import settings

from iqstate.testing.conformance import state_machine_settings


def test_profile():
    assert settings().max_examples == {expected}
    assert state_machine_settings(30, 10).max_examples == {expected}
"""


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:schemathesis",
            *args,
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )


def test_a_plugin_project_can_run_with_the_long_profile(tmp_path: Path) -> None:
    (tmp_path / "test_long.py").write_text(CHECK_PROFILE.format(expected=2_000))
    completed = run_pytest(tmp_path, "--hypothesis-profile=long")
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_a_projects_own_long_profile_is_kept(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from hypothesis import settings\nsettings.register_profile('long', max_examples=500)\n"
    )
    (tmp_path / "test_long.py").write_text(CHECK_PROFILE.format(expected=500))
    completed = run_pytest(tmp_path, "--hypothesis-profile=long")
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.fixture
def restore_profile() -> Iterator[None]:
    previous = settings.get_current_profile_name()
    yield
    settings.load_profile(previous)


def test_state_machines_run_longer_only_when_the_profile_asks_for_more(
    restore_profile: None,
) -> None:
    settings.load_profile("default")
    assert state_machine_settings(60, 40).max_examples == 60
    settings.register_profile("iqstate-test-longer", max_examples=700)
    settings.load_profile("iqstate-test-longer")
    assert state_machine_settings(60, 40).max_examples == 700
    assert state_machine_settings(900, 40).max_examples == 900, "never shortened"
    assert state_machine_settings(60, 40).stateful_step_count == 40
