"""The repository keeps its promises: CI runs exactly the README's test command."""

import shutil
import sysconfig
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up and test", 1)[1]
    return section.split("```bash", 1)[1].split("```", 1)[0].strip()


def test_ci_runs_the_readme_test_command() -> None:
    command = readme_test_command()
    assert "pytest" in command
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines


def test_the_compiled_paths_are_built_where_a_compiler_is() -> None:
    """The speedups are optional, so a C file that stops compiling would only make iqstate
    slower, silently; where this machine can build them, their absence is an error."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if (
        shutil.which("cc") is None
        or not headers.exists()
        or not Path("/usr/include/zlib.h").exists()
    ):
        pytest.skip("no C compiler, Python headers or zlib headers here")
    missing = [
        name
        for name in (
            "iqstate_speedups.json_writer",
            "iqstate_speedups.pairs",
            "iqstate_speedups.sealing",
            "iqstate_speedups.slots",
            "iqstate_speedups.versions",
        )
        if find_spec(name) is None
    ]
    assert not missing, f"{missing} did not build: reinstall speedups/ with pip -v to see why"
