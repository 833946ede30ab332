"""`iqstate new-store`: works from a built iqstate, and refuses names that cannot work.

A refusal is one line on stderr and exit code 2 (no traceback), and nothing is written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from iqstate.cli import main
from iqstate.scaffold import render

CORE = Path(__file__).parent.parent.parent / "core"

RUN_CLI_FROM = (
    "import sys, iqstate.cli as cli; "
    "assert cli.__file__.startswith(sys.argv[1]), f'iqstate imported from {cli.__file__}'; "
    "raise SystemExit(cli.main(sys.argv[2:]))"
)
"""Runs `iqstate` from the folder in argv[1] (an unpacked wheel), not from the checkout."""


def build_wheel(source: Path, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(into), str(source)],
        check=True,
    )  # fmt: skip
    (wheel,) = into.glob("iqstate-*.whl")
    return wheel


def build_sdist(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(into)],
        cwd=CORE, check=True, capture_output=True,
    )  # fmt: skip
    (sdist,) = into.glob("iqstate-*.tar.gz")
    return sdist


@pytest.mark.parametrize("built_from", ["checkout", "sdist"])
def test_new_store_works_from_a_built_wheel(tmp_path: Path, built_from: str) -> None:
    source = CORE if built_from == "checkout" else build_sdist(tmp_path / "sdist")
    wheel = build_wheel(source, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as archive:
        assert "iqstate/store_template/cookiecutter.json" in archive.namelist()
        archive.extractall(tmp_path / "installed")

    installed = str(tmp_path / "installed")
    rendered = subprocess.run(
        [sys.executable, "-c", RUN_CLI_FROM, installed,
         "new-store", "my-kv", "--output-dir", str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": installed, "IQSTATE_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    project = tmp_path / "out" / "my-kv"
    assert (project / "src" / "iqstate_my_kv" / "store.py").is_file()
    assert 'name = "iqstate-my-kv"' in (project / "pyproject.toml").read_text()


def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *more: str) -> str:
    """Run `iqstate new-store name *more`; assert it was refused cleanly; its one-line message."""
    before = set(tmp_path.iterdir())
    code = main(["new-store", name, "--output-dir", str(tmp_path), *more])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("iqstate new-store: ")
    assert captured.err.count("\n") == 1
    assert set(tmp_path.iterdir()) == before, "a refused name writes nothing"
    return captured.err


@pytest.mark.parametrize("name", ["bad name!", "2fast", "my--store", "store-", "_store", "café"])
def test_refuses_names_that_generate_a_broken_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    message = refusal(tmp_path, capsys, name)
    assert f"{name!r} is not a valid store name" in message
    assert "e.g. my-store" in message


@pytest.mark.parametrize("name", ["memory", "rocksdb", "lmdb", "sqlite", "Memory", "prefix_scan"])
def test_refuses_names_of_iqstate_engines_and_plugins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    message = refusal(tmp_path, capsys, name)
    engine = name.lower().replace("_", "-")
    assert f"{engine!r} is already the name of an iqstate engine or plugin" in message


def test_refuses_an_existing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-store", "Acme Store", "--output-dir", str(tmp_path)]) == 0
    project = tmp_path / "acme-store"
    assert (project / "src" / "iqstate_acme_store" / "plugin.py").is_file()
    store = (project / "src" / "iqstate_acme_store" / "store.py").read_text()
    capsys.readouterr()

    message = refusal(tmp_path, capsys, "acme_store")
    assert f"{project} already exists; choose another name or --output-dir" in message
    assert (project / "src" / "iqstate_acme_store" / "store.py").read_text() == store


@pytest.mark.parametrize("given", ["missing", "a-file", "a-folder"])
def test_refuses_a_template_that_is_not_one_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a-file").write_text("not a template\n")
    (elsewhere / "a-folder").mkdir()
    output = tmp_path / "out"
    output.mkdir()
    template = elsewhere / given
    message = refusal(output, capsys, "my-store", "--template", str(template))
    assert f"--template {template} is not a store template" in message


def with_byte_code(template: Path) -> Path:
    """`template` with byte code beside its modules, as an installer leaves it after
    compiling the wheel's `store_template/`."""
    (module,) = template.rglob("query.py")
    cache = module.parent / "__pycache__"
    cache.mkdir()
    (cache / "query.cpython-311.pyc").write_bytes(b"\x00")
    (module.parent / "stray.pyc").write_bytes(b"\x00")
    return template


def byte_code(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]


def test_rendering_leaves_out_byte_code(tmp_path: Path) -> None:
    template = with_byte_code(
        Path(shutil.copytree(CORE.parent / "cookiecutter-store", tmp_path / "template"))
    )
    project = render("clean-store", tmp_path / "out", template, taken=())
    assert (project / "src" / "iqstate_clean_store" / "query.py").is_file()
    assert byte_code(project) == []


def test_wheels_leave_out_byte_code_of_the_template(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(CORE, checkout / "core")
    with_byte_code(
        Path(shutil.copytree(CORE.parent / "cookiecutter-store", checkout / "cookiecutter-store"))
    )
    wheel = build_wheel(checkout / "core", tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(name.endswith("store_template/cookiecutter.json") for name in names)
    assert [
        n for n in names if "store_template" in n and ("__pycache__" in n or n.endswith(".pyc"))
    ] == []
