"""`iqstate new-store`: render the store plugin template for a name that can work.

The template is `cookiecutter-store/` of the repository. Wheels ship it as package data
(`iqstate/store_template/`, added by `core/hatch_build.py`); an editable install finds it
in its checkout. The name is checked before anything is rendered: it must make a valid
distribution, package and class name, and must not be the name of an engine or plugin
that iqstate or an installed plugin already uses.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path

from iqstate.errors import IqstateError

PROJECT_NAMES = frozenset(
    {"builtins", "memory", "rocksdb", "lmdb", "sqlite", "spark", "http", "prefix-scan", "kafka"}
)
"""Engines and plugins of the iqstate project (`iqstate-<name>`), installed here or not."""

_VALID = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

NOT_TEMPLATE = ("__pycache__", "*.pyc", "*.pyo")
"""Files in a template folder that are not part of the template: byte code, which an
installer writes next to the template's `.py` files when it compiles the wheel."""


class ScaffoldError(IqstateError):
    """`iqstate new-store` cannot render this name here; the message says why and what to do."""


def hyphenated(name: str) -> str:
    """The folder and engine name the template derives from `name` (`My_Store`: `my-store`)."""
    return name.lower().replace(" ", "-").replace("_", "-")


def check_name(name: str, taken: Collection[str]) -> str:
    """`name` hyphenated; `ScaffoldError` if it would generate a broken or clashing plugin."""
    engine = hyphenated(name)
    if not _VALID.fullmatch(engine):
        raise ScaffoldError(
            f"{name!r} is not a valid store name: use lowercase letters, digits and single "
            "hyphens (or spaces or underscores), starting with a letter, e.g. my-store"
        )
    if engine in PROJECT_NAMES or engine in taken:
        raise ScaffoldError(
            f"{engine!r} is already the name of an iqstate engine or plugin; choose another, "
            f"e.g. my-{engine}"
        )
    return engine


def shipped_template() -> Path | None:
    """The template inside the installed package, else `cookiecutter-store/` of a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "store_template"
    if (packaged / "cookiecutter.json").is_file():
        return packaged
    for parent in here.parents:
        candidate = parent / "cookiecutter-store"
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    return None


def render(name: str, output_dir: Path, template: Path | None, taken: Collection[str]) -> Path:
    """Render the template for `name` into `output_dir`; the new project's folder."""
    engine = check_name(name, taken)
    target = output_dir / engine
    if target.exists():
        raise ScaffoldError(f"{target} already exists; choose another name or --output-dir")
    source = template or shipped_template()
    if source is None:
        raise ScaffoldError("no store template found; pass --template <path to cookiecutter-store>")
    if not (source / "cookiecutter.json").is_file():
        raise ScaffoldError(
            f"--template {source} is not a store template (a folder with a cookiecutter.json, "
            "like cookiecutter-store/ of the iqstate repository)"
        )
    try:
        from cookiecutter.exceptions import CookiecutterException
        from cookiecutter.main import cookiecutter
    except ImportError:
        raise ScaffoldError(
            "it needs cookiecutter: pip install cookiecutter (or install iqstate with its "
            "new-store extra, e.g. pip install './core[new-store]' from a checkout)"
        ) from None
    with tempfile.TemporaryDirectory(prefix="iqstate-template-") as scratch:
        clean = shutil.copytree(
            source, Path(scratch) / source.name, ignore=shutil.ignore_patterns(*NOT_TEMPLATE)
        )
        try:
            created = cookiecutter(
                str(clean),
                no_input=True,
                extra_context={"name": name, "hyphenated": engine},
                output_dir=str(output_dir),
            )
        except CookiecutterException as error:
            raise ScaffoldError(f"cannot render {source}: {error}") from None
    return Path(created)
