"""Every distribution's package is layered: no module imports, at run time, one that imports
it back (`support.import_graph` says what counts). A cycle hides which module is the top,
breaks on import order, and lets jobs leak between modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.import_graph import cycles, import_graph

ROOT = Path(__file__).parent.parent
PACKAGES = sorted(
    path
    for pattern in ("core/src/*", "plugins/*/src/*", "contrib_stores/*/src/*")
    for path in ROOT.glob(pattern)
    if (path / "__init__.py").is_file()
)


def test_every_distribution_is_checked() -> None:
    names = {path.name for path in PACKAGES}
    assert {"iqstate", "iqstate_kafka", "iqstate_spark", "iqstate_http"} <= names


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: path.name)
def test_no_import_cycles(package: Path) -> None:
    assert cycles(import_graph(package)) == []


def write(package: Path, modules: dict[str, str]) -> Path:
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(source)
    return package


def test_a_runtime_cycle_is_found_even_through_a_lazy_import(tmp_path: Path) -> None:
    package = write(
        tmp_path / "layered",
        {
            "settings": "X = 1\n",
            "top": "from layered.settings import X\n",
            # The bottom reaching up, inside a function: still a runtime import.
            "bottom": "def connect():\n    from layered.top import Top\n",
            "middle": "from . import bottom\n",
        },
    )
    (package / "top.py").write_text("from layered.middle import bottom\nclass Top: ...\n")
    assert cycles(import_graph(package)) == [["layered.bottom", "layered.middle", "layered.top"]]


def test_imports_only_for_type_checking_are_not_a_cycle(tmp_path: Path) -> None:
    package = write(
        tmp_path / "typed",
        {
            "store": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from typed.context import Context\n",
            "context": "from typed.store import Store\n",
        },
    )
    assert cycles(import_graph(package)) == []
    (package / "store.py").write_text("import typed.context\n")
    assert cycles(import_graph(package)) == [["typed.context", "typed.store"]]
