"""Every ```python block in docs/ runs, in order, per page, and its assertions hold."""

from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"


def python_blocks(page: Path) -> list[str]:
    blocks = []
    for chunk in page.read_text().split("```python")[1:]:
        blocks.append(chunk.split("```", 1)[0])
    return blocks


PAGES = sorted(page for page in DOCS.glob("*.md") if python_blocks(page))


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(python_blocks(page), start=1):
        code = compile(block, f"{page.name} block {number}", "exec")
        exec(code, namespace)
