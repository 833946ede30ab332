"""How much code extending iqstate took, counted from the repository.

Counts files and non-blank, non-comment lines of the example extensions: a new query type
across three engines (`plugins/prefix-scan`) and a new persistent engine with its own query
type (`contrib_stores/sqlite`), source and tests separately, and checks that the query
plugin changed nothing in `core/` or the engine plugins (by git history).

    python bench/extension_cost.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX_SCAN_MARKER = "plugins/prefix-scan/pyproject.toml"
EXAMPLES = {
    "new query type (PrefixScanQuery, 3 engines + HTTP codec)": (
        "plugins/prefix-scan",
        ["tests/plugins/test_prefix_scan.py"],
    ),
    "new persistent engine + own query (iqstate-sqlite)": (
        "contrib_stores/sqlite",
        ["tests/contrib/test_sqlite.py"],
    ),
}


def code_lines(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def files_of(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix in {".py", ".toml"} and "egg-info" not in str(p)
    )


def main() -> None:
    print(f"{'extension':<58}{'files':>6}{'lines':>7}   tests (files / lines)")
    for label, (folder, tests) in EXAMPLES.items():
        sources = files_of(ROOT / folder)
        test_paths = [ROOT / t for t in tests]
        print(
            f"{label:<58}{len(sources):>6}{sum(map(code_lines, sources)):>7}   "
            f"{len(test_paths)} / {sum(map(code_lines, test_paths))}"
        )
    added = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=A", "--", PREFIX_SCAN_MARKER],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if added:
        commit = added[-1]
        touched = subprocess.run(
            ["git", "show", "--name-only", "--format=", commit],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        outside = [
            p for p in touched if p.startswith(("core/", "plugins/rocksdb/", "plugins/lmdb/"))
        ]
        print(f"files the PrefixScanQuery commit changed in core/ and the engines: {len(outside)}")


if __name__ == "__main__":
    main()
