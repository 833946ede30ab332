"""The store template: rendered for several names, and the generated project's tests pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).parent.parent.parent
TEMPLATE = ROOT / "cookiecutter-store"


def rendered_files(project: Path) -> set[str]:
    return {str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()}


@pytest.mark.parametrize(
    ("name", "directory", "package", "class_name"),
    [
        ("demo-store", "demo-store", "iqstate_demo_store", "DemoStoreStore"),
        ("my_kv", "my-kv", "iqstate_my_kv", "MyKvStore"),
        ("Acme Store", "acme-store", "iqstate_acme_store", "AcmeStoreStore"),
    ],
)
def test_renders_the_exact_file_set(
    tmp_path: Path, name: str, directory: str, package: str, class_name: str
) -> None:
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context={"name": name},
                                output_dir=str(tmp_path)))  # fmt: skip
    assert project.name == directory
    assert rendered_files(project) == {
        "README.md",
        "pyproject.toml",
        f"src/{package}/__init__.py",
        f"src/{package}/plugin.py",
        f"src/{package}/query.py",
        f"src/{package}/store.py",
        "tests/test_store.py",
    }
    pyproject = (project / "pyproject.toml").read_text()
    assert f'name = "iqstate-{directory}"' in pyproject
    assert f'{directory} = "{package}.plugin"' in pyproject
    store = (project / f"src/{package}/store.py").read_text()
    assert f"class {class_name}(PersistentKeyValueStore)" in store
    assert f"class {class_name[: -len('Store')]}WindowStore(PersistentWindowStore)" in store
    for source in project.rglob("*.py"):
        compile(source.read_text(), str(source), "exec")
        assert "{{" not in source.read_text(), f"unrendered template text in {source}"


@pytest.mark.iqstate_slow
def test_generated_project_passes_its_tests_in_a_fresh_environment(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "iqstate.cli",
            "new-store",
            "demo-store",
            "--output-dir",
            str(tmp_path),
        ],
        check=True,
    )
    project = tmp_path / "demo-store"
    environment = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(environment)], check=True)
    python = environment / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            str(ROOT / "core"),
            "-e",
            f"{project}[testing]",
        ],
        check=True,
    )
    tests = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=project, capture_output=True, text=True,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    # The template's store claims atomic commits, so the SIGKILL tests run, not skip.
    assert "does not claim atomic commits" not in tests.stdout, tests.stdout
