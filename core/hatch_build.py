"""Build hook: ships the repository's `cookiecutter-store/` inside the package.

`iqstate new-store` renders that template; an installed iqstate has no repository next to
it, so wheels carry the template as `iqstate/store_template/`. Built from a checkout, the
template is taken from `../cookiecutter-store`; an sdist holds it under
`src/iqstate/store_template/`, where the wheel built from the sdist finds it as package
data. Editable installs skip it: they find `cookiecutter-store/` in their checkout.
Byte code left in the checkout's template (`__pycache__`, `.pyc`) is not shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TARGET_PATHS = {"wheel": "iqstate/store_template", "sdist": "src/iqstate/store_template"}


def template_files(template: Path, target: str) -> dict[str, str]:
    """The template's files, by source path, at their place under `target`, byte code
    left out."""
    return {
        str(path): f"{target}/{path.relative_to(template).as_posix()}"
        for path in sorted(template.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.relative_to(template).parts
        and path.suffix not in {".pyc", ".pyo"}
    }


class StoreTemplateHook(BuildHookInterface):
    """Adds the store template to wheels and sdists built from a checkout."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        template = Path(self.root).parent / "cookiecutter-store"
        if version == "editable" or not template.is_dir():
            return
        build_data["force_include"].update(template_files(template, TARGET_PATHS[self.target_name]))
