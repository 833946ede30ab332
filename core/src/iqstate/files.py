"""Replacing a small file so that a crash or power loss leaves the old or the new content."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`,
    and fsync the directory so the rename itself survives power loss."""
    fd, temporary = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
